"""ablate --png/--svg draws on its terminal grid's scale: a symmetric log scale, so that a head's
-1.11 beside block 0's MLP at -11.35 is a colour, not white; the colour bar names the scale
(patch's, linear, too)."""

from __future__ import annotations

import numpy as np
import pytest

from tfcli.cli.views import experiments
from tfcli.draw import images


def _picture(values, log: bool, zh: bool = False):
    top = experiments.top_of(values)
    panel = images.Panel("t", experiments.shade(values, top, log), np.ones(values.shape, dtype=bool), ["0"], [str(j) for j in range(values.shape[1])])
    return images.layout([[panel]], "h", measure=images.estimate, signed=experiments.picture_scale(top, log, zh))


def _whiteness(rgb) -> float:
    """0 for the scale's end colour, 1 for the white of 0: how far a cell is from saying anything."""
    return float(np.abs(np.asarray(rgb, dtype=float) - images.NEGATIVE).sum() / np.abs(np.subtract(images.ZERO, images.NEGATIVE)).sum())


def test_a_small_real_effect_is_a_colour_on_the_log_scale():
    values = np.array([[-11.35, -1.11, -0.60, 0.0]])  # SmolLM2's block 0 MLP, heads 1.4 and 23.4 (README)
    log, linear = (_picture(values, k).bitmaps[0][4][0] for k in (True, False))
    assert _whiteness(log[1]) < 0.55 and _whiteness(log[2]) < 0.7  # plainly blue
    assert _whiteness(linear[1]) > 0.85  # what the linear picture drew: nearly white
    assert tuple(log[3]) == images.ZERO and tuple(log[0]) == images.NEGATIVE
    # The terminal's cells and the picture use the one scale.
    assert experiments.shade(values, 11.35, True)[0, 1] == pytest.approx(experiments.shade(-1.11, 11.35, True))


def test_the_colour_bar_names_its_scale_and_puts_a_tenth_halfway():
    d = _picture(np.array([[-11.35, -1.11, 2.0]]), True)
    texts = [t[2] for t in d.texts]
    assert "log scale" in texts and "+11.35" in texts and "-11.35" in texts and "-1.14" in texts and "0" in texts
    y = {t[2]: t[1] for t in d.texts}
    assert y["+11.35"] < y["+1.14"] < y["0"] < y["-1.14"] < y["-11.35"]
    assert abs((y["+1.14"] - y["+11.35"]) - (y["0"] - y["+1.14"])) < 0.1 * (y["0"] - y["+11.35"])  # a tenth of top about halfway
    assert y["log scale"] > y["-11.35"]  # under the bar
    assert "对数刻度" in [t[2] for t in _picture(np.array([[-1.0, 0.5]]), True, zh=True).texts]
    assert "linear scale" in [t[2] for t in _picture(np.array([[-1.0, 0.5]]), False).texts]


@pytest.mark.parametrize(("args", "scale"), [
    (["ablate", "ROMEO:"], "log scale"),
    (["patch", "ROMEO:", "JULIE:", "--answer", " ", "--wrong", "e"], "linear scale"),
    (["ablate", "ROMEO:", "--lang", "zh"], "对数刻度"),
])  # fmt: skip
def test_the_pictures_say_the_scale_of_their_grid(cli, tmp_path, args, scale):
    r = cli(*args, "-m", "shakespeare", "--svg", tmp_path / "x.svg")
    assert r.exit_code == 0, r.stderr
    svg = (tmp_path / "x.svg").read_text()
    assert f">{scale}</text>" in svg
