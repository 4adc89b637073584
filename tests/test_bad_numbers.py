"""Numbers that are not finite: NaN or Inf in a model's weights give one line that names the likely
cause; extreme but valid options work as the limit they tend to (a tiny temperature is greedy) or
are refused up front; no NumPy warning reaches the user raw."""

from __future__ import annotations

import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

from badinput import Cases, Env, gen, run_case, run_tfcli
from conftest import TINY_GPT2, TINY_LLAMA

CASES = Cases()


def _poisoned(env, src, name: str, value: float, where=(0,)) -> object:
    m = env.model(src)
    weights = load_file(m / "model.safetensors")
    arr = weights[name].copy()
    arr[where] = value
    weights[name] = arr
    save_file(weights, m / "model.safetensors")
    return m


@CASES.case(1, "the model's logits are not finite (NaN in", "its weights likely hold NaN or Inf")
def nan_in_a_layer_norm(env):
    return gen(_poisoned(env, TINY_GPT2, "transformer.ln_f.weight", np.nan))


@CASES.case(1, "the model's logits are not finite", "check or fetch the weight file again")
def inf_in_the_embedding(env):
    """Every token's row: whatever the prompt, the pass meets it."""
    return gen(_poisoned(env, TINY_GPT2, "transformer.wte.weight", np.inf, (slice(None), 0)), "-t", "0")


@CASES.case(1, "the model's logits are not finite", "its weights likely hold NaN or Inf")
def nan_in_a_llama_projection(env):
    return gen(_poisoned(env, TINY_LLAMA, "model.layers.0.mlp.down_proj.weight", np.nan))


@CASES.case(1, "the model's logits are not finite", "its weights likely hold NaN or Inf")
def nan_with_show_probs(env):
    return gen(_poisoned(env, TINY_GPT2, "transformer.ln_f.bias", np.nan), "--show-probs", "3")


_HUGE = str(10**160)


@CASES.case(2, "d_model must be at most 10^18, not 1000000000", "counted up to 10^18")
def params_d_model_of_10_160(env):
    return ["params", "--d-model", _HUGE, "--heads", "1"]


@CASES.case(2, "context must be at most 10^18")
def params_context_of_10_160(env):
    return ["params", "--context", _HUGE]


@CASES.case(2, "(5,000 characters) is far too large a number (5,000 digits)")
def params_layers_of_5000_digits(env):
    return ["params", "--layers", "9" * 5000]


@CASES.case(2, "vocab must be at most 10^18")
def params_vocab_of_10_19_from_a_model(env):
    return ["params", "-m", TINY_GPT2, "--vocab", str(10**19)]


@CASES.case(2, "--seed must be between 0 and 2^63-1, not -1")
def geometry_seed_minus_one(env):
    return ["geometry", "-m", TINY_GPT2, "--seed", "-1", "--sample", "10"]


@CASES.case(2, "--seed must be between 0 and 2^63-1")
def geometry_seed_2_64(env):
    return ["geometry", "-m", TINY_GPT2, "--seed", str(2**64), "--sample", "10"]


@pytest.mark.parametrize("make, code, needles", CASES)
def test_bad_input_is_one_line_with_the_fix(cli, tmp_path, monkeypatch, make, code, needles):
    run_case(cli, tmp_path, monkeypatch, make, code, needles)


def _text(cli, *extra) -> str:
    r = cli(*gen(TINY_GPT2, "-n", "12", "--seed", "1", "-q", *extra, prompt="To be or"))
    assert r.exit_code == 0 and r.stderr == "", r.stderr
    return r.stdout


@pytest.mark.parametrize("t", ["1e-45", "1e-300", "5e-324"])
def test_a_tiny_temperature_is_greedy(cli, t):
    assert _text(cli, "-t", t) == _text(cli, "-t", "0")


@pytest.mark.parametrize(
    "extra",
    [["-t", "1e308"], ["-t", "1e38"], ["--repetition-penalty", "1e-40"], ["--repetition-penalty", "1e-300"], ["--repetition-penalty", "1e300"],
     ["--repetition-penalty", "1e-40", "-t", "1e-45"], ["--repetition-penalty", "1e-40", "--show-probs", "2"]],
    ids=lambda e: " ".join(e),
)  # fmt: skip
def test_extreme_options_work_without_a_warning(cli, extra):
    r = cli(*gen(TINY_GPT2, "-n", "8", "--seed", "1", "-q", *extra))
    assert r.exit_code == 0, r.stderr
    assert "Warning" not in r.stderr and "warning" not in r.stderr and "Traceback" not in r.stderr, r.stderr


def test_no_numpy_warning_reaches_the_terminal_raw(tmp_path):
    """Through the real entry point: -t 1e308 printed NumPy's `RuntimeWarning: overflow encountered
    in cast` with its source line."""
    r = run_tfcli(tmp_path, *gen(TINY_GPT2, "-n", "4", "-t", "1e308", "--seed", "0"))
    assert r.returncode == 0, r.stderr
    assert b"RuntimeWarning" not in r.stderr and b"overflow" not in r.stderr, r.stderr


def test_a_library_warning_becomes_one_warning_line(tmp_path):
    """Whatever still warns (here a NumPy warning raised on purpose inside a command) is one line."""
    code = (
        "import sys, numpy as np; from tfcli.cli import app\n"
        "import tfcli.engine.tokenizer as tk\n"
        "enc = tk.Tokenizer.prompt\n"
        "tk.Tokenizer.prompt = lambda self, text: (np.float32(1e308), enc(self, text))[1]\n"
        f"app(['tokenize', '-m', {str(TINY_GPT2)!r}, 'hi'], prog_name='tfcli')\n"
    )
    import subprocess
    import sys

    from badinput import ROOT, subprocess_env

    r = subprocess.run([sys.executable, "-c", code], capture_output=True, env=subprocess_env(tmp_path), cwd=ROOT, timeout=60)
    lines = r.stderr.decode().strip().splitlines()
    assert r.returncode == 0, r.stderr
    assert lines == ["warning: overflow encountered in cast (RuntimeWarning)"], lines


@pytest.mark.parametrize("args", [["--d-model", str(10**17), "--heads", "1", "--context", str(10**18), "--layers", str(10**18)], ["--vocab", str(10**18), "--json"]], ids=["table", "json"])
def test_the_largest_accepted_sizes_give_a_table(cli, args):
    """Sizes up to the bound: every figure (FLOPs and bytes far past a float's 10^308 are not reached) is written."""
    r = cli("params", *args)
    assert r.exit_code == 0 and "Traceback" not in r.stderr, r.stderr


def test_the_byte_and_flop_formatters_take_any_int():
    from tfcli.numbers import si, size

    assert size(10**400).endswith(" TB") and si(10**400, "FLOP").endswith("PFLOP")
    assert size(12_345_678) == "12.3 MB" and si(4_831_838_208, "FLOP") == "4.83 GFLOP"


@pytest.mark.parametrize("dims", ["2", "2,3", "3"])
def test_geometry_in_two_dimensions_has_no_nan(cli, dims):
    r = cli("geometry", "-m", TINY_GPT2, "--dims", dims, "--sample", "20")
    assert r.exit_code == 0, r.stderr
    assert "nan" not in r.stdout.lower() and "warning" not in r.stderr.lower(), (r.stdout, r.stderr)
    r = cli("geometry", "-m", TINY_GPT2, "--dims", dims, "--sample", "20", "--json")
    import json

    doc = json.loads(r.stdout)
    row = next(x for x in doc["rows"] if x["d"] == 2 and x["exact_within"]) if "2" in dims.split(",") else None
    if row:
        assert abs(row["exact_within"]["5"] - 10 / 180) < 1e-3  # uniform angles: 10° of 180°
