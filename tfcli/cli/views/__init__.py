"""Drawing only: terminal tables, heatmaps, images."""
