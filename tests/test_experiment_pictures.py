"""The pictures of patch and ablate: signed scales under a plain title, a log scale that shows
ablation's small effects, and a legend that says so."""

from __future__ import annotations

import pytest


def test_ablation_colours_show_small_effects_and_say_their_scale():
    from tfcli.cli.views.experiments import legend, shade

    top = 11.35  # block 0's MLP in the issue; head 1.4 at -1.11 and MLP 11 at -4.11 looked like +0.00
    for small in (-1.11, -4.11, -0.5):
        assert shade(small, top, log=True) <= -0.3  # a third of the way to full blue, at least
    assert shade(-0.01, top, log=True) > -0.05  # noise stays near the grey of 0
    assert shade(-top, top, log=True) == -1.0 and shade(2.0, top, log=True) > 0
    assert shade(-1.11, top) > -0.1  # what the linear scale did
    assert "log scale" in legend(top, True) and "11.35" in legend(top, True)
    assert "对数刻度" in legend(top, True, zh=True)


def test_the_ablation_grid_in_colour_has_a_legend(monkeypatch, tmp_path):
    from typer.testing import CliRunner

    from tfcli.cli import app
    from tfcli.cli.views import inside

    monkeypatch.setenv("TFCLI_HOME", str(tmp_path))
    monkeypatch.setattr(inside, "uses_colour", lambda console: True)
    r = CliRunner().invoke(app, ["ablate", "ROMEO:", "-m", "shakespeare"])
    assert r.exit_code == 0, r.stderr
    assert "colour: blue negative, red positive; log scale" in r.stdout



def test_a_signed_picture_draws_negatives_blue_and_has_no_masked_swatch():
    import numpy as np

    from tfcli.draw import images

    values = np.array([[-0.2, 0.0, 1.0]])
    panel = images.Panel("t", values, np.ones(values.shape, dtype=bool), ["emb"], ["a", "b", "c"])
    d = images.layout([[panel]], "h", measure=images.estimate, signed=1.0)
    cells = d.bitmaps[0][4][0]  # [C, 3] of the one row
    assert tuple(cells[1]) == images.ZERO and cells[0][2] > cells[0][0]  # -0.2: bluish, not the colour of 0
    assert tuple(cells[2]) == images.POSITIVE
    texts = [t[2] for t in d.texts]
    assert images.MASKED_LABEL not in texts and "-1.00" in texts and "+1.00" in texts and "0" in texts
    masked = images.Panel("t", np.zeros((2, 2)), np.array([[True, False], [True, True]]), ["a", "b"], ["a", "b"])
    assert images.MASKED_LABEL in [t[2] for t in images.layout([[masked]], "h", measure=images.estimate).texts]  # attention: still said
    unmasked = images.Panel("t", np.zeros((2, 2)), np.ones((2, 2), dtype=bool), ["a", "b"], ["a", "b"])
    assert images.MASKED_LABEL not in [t[2] for t in images.layout([[unmasked]], "h", measure=images.estimate).texts]  # lens: nothing masked


@pytest.mark.parametrize("args", [
    ["patch", "ROMEO:", "JULIE:", "--answer", " ", "--wrong", "e"],
    ["ablate", "ROMEO:"],
])  # fmt: skip
def test_experiment_pictures_are_signed_under_a_plain_title(cli, tmp_path, args):
    r = cli(*args, "-m", "shakespeare", "--svg", tmp_path / "x.svg")
    assert r.exit_code == 0, r.stderr
    svg = (tmp_path / "x.svg").read_text()
    assert "masked" not in svg and "activation patching (" not in svg
    assert ">0</text>" in svg and ">-" in svg  # a bar from -top through 0 to +top
    assert "how much of the answer" in svg or "taken out" in svg
