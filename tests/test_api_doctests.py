"""The examples in the public API's docstrings run as shown (doctest), on the shipped models.

Their globals: `np`, `tmp` (a temporary folder to save into) and `sae_folder`, a small SAE on the
shakespeare model's block 2 trained here once, as `tfcli features train -o` writes one."""

from __future__ import annotations

import doctest
import importlib

import numpy as np
import pytest

MODULES = ["tfcli", "tfcli.api.model", "tfcli.api.cache", "tfcli.api.experiments", "tfcli.api.results", "tfcli.api.attention",
           "tfcli.api.features", "tfcli.api.params", "tfcli.api.weights",
           "tfcli.api.training", "tfcli.api.page"]
TEXT = ("First Citizen: Before we proceed any further, hear me speak. All: Speak, speak. First Citizen: You are all "
        "resolved rather to die than to famish? All: Resolved. resolved. ") * 8  # fmt: skip


@pytest.fixture(scope="module")
def sae_folder(tmp_path_factory):
    from typer.testing import CliRunner

    from tfcli.cli import app

    d = tmp_path_factory.mktemp("sae")
    (d / "text.txt").write_text(TEXT)
    r = CliRunner().invoke(app, ["features", "train", "-m", "shakespeare", str(d / "text.txt"), "--block", "2", "-o", str(d / "sae"),
                                 "--features", "256", "--steps", "30", "--batch-size", "256", "--buffer", "2048", "--json", "--threads", "1"])  # fmt: skip
    assert r.exit_code == 0, (r.stdout, r.stderr, r.exception)
    return d / "sae"


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples_run(name, sae_folder, tmp_path):
    module = importlib.import_module(name)
    finder = doctest.DocTestFinder()
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    tests = [t for t in finder.find(module, name, globs={**vars(module), "np": np, "tmp": tmp_path, "sae_folder": sae_folder,
                                                       "text_file": sae_folder.parent / "text.txt"}) if t.examples]
    assert tests, f"{name} has no examples"
    for t in tests:
        runner.run(t)
    result = runner.summarize(verbose=False)
    assert result.failed == 0, f"{result.failed} of {result.attempted} examples of {name} failed (their output above)"
