"""The page `tfcli explore` writes: its HTML template, stylesheet and script, inlined into one file (page.py)."""
