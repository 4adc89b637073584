"""Pictures without a terminal: the heatmaps, grids and colour scales that the command line writes
as PNG/SVG and the Python API shows inline in a notebook (`_repr_html_`). Nothing here imports typer
or rich, so a notebook that draws a result never loads the command line's libraries.

    images.py   the layout of panels, labels and colour bars, written as PNG (Pillow) or SVG text
    scales.py   viridis for weights in [0, 1]; the signed scale (linear or log) of the experiments
    labels.py   a token as a label: whitespace made visible, a character's pieces numbered
    lens.py     the logit lens as a picture
    fonts.py    which font draws each text;  escape.py  one escaping function per medium
"""
