"""tfcli generate through the real CLI: streams, statistics, seeds, errors and Ctrl-C."""

from __future__ import annotations

import json
import shutil

import pytest

from conftest import TINY_GPT2, TINY_LLAMA, interrupt_call, one_line_error
from tfcli.engine.tokenizer import TextStream, Tokenizer
from tfcli.engine.fast import FAST


def test_text_on_stdout_statistics_on_stderr(cli):
    r = cli("generate", "-m", TINY_GPT2, "Hello", "-n", "10", "--seed", "1")
    assert r.exit_code == 0, r.stderr
    assert r.stdout.strip()  # the text
    assert "tok/s" not in r.stdout
    stats = r.stderr.strip().splitlines()[-1]
    assert "1 prompt tokens" in stats or "prompt tokens" in stats
    assert "10 new" in stats and "decode" in stats and "prefill" in stats and "load" in stats


def test_same_seed_same_output_different_seed_different_output(cli):
    a = cli("generate", "-m", TINY_GPT2, "The", "-n", "30", "--seed", "42", "-t", "1")
    b = cli("generate", "-m", TINY_GPT2, "The", "-n", "30", "--seed", "42", "-t", "1")
    c = cli("generate", "-m", TINY_GPT2, "The", "-n", "30", "--seed", "43", "-t", "1")
    assert a.exit_code == b.exit_code == c.exit_code == 0
    assert a.stdout == b.stdout
    assert a.stdout != c.stdout


def test_temperature_zero_is_greedy_and_ignores_seed(cli):
    a = cli("generate", "-m", TINY_LLAMA, "The", "-n", "20", "-t", "0", "--seed", "1")
    b = cli("generate", "-m", TINY_LLAMA, "The", "-n", "20", "-t", "0", "--seed", "2")
    assert a.exit_code == 0 and a.stdout == b.stdout


def test_greedy_cli_equals_engine_argmax(cli):
    import numpy as np

    from tfcli.store import load

    m = load(TINY_GPT2)
    ids = m.tokenizer.encode("The")
    cache = m.model.new_cache(len(ids) + 15)
    out, x = [], np.array(ids)
    for _ in range(15):
        tok = int(np.argmax(m.model.forward(x, cache, run=FAST)[-1]))
        out.append(tok)
        x = np.array([tok])
    r = cli("generate", "-m", TINY_GPT2, "The", "-n", "15", "-t", "0")
    assert r.stdout == "The" + m.tokenizer.decode(out) + "\n"  # the prompt, then its continuation


def test_stop_string_ends_generation_and_is_not_printed(cli):
    full = cli("generate", "-m", TINY_GPT2, "The", "-n", "60", "-t", "0").stdout.rstrip("\n").removeprefix("The")
    stop = full[10:13]
    r = cli("generate", "-m", TINY_GPT2, "The", "-n", "60", "-t", "0", "--stop", stop)
    assert r.exit_code == 0
    assert r.stdout.rstrip("\n") == "The" + full[: full.index(stop)]
    assert "stopped: stop string" in r.stderr


def test_show_probs_shows_candidates_on_stderr(cli):
    r = cli("generate", "-m", TINY_GPT2, "The", "-n", "3", "--show-probs", "4", "-t", "0.5", "--seed", "0")
    assert r.exit_code == 0
    assert r.stderr.count("chose") == 3
    assert "%" in r.stderr and "model (T=1)" in r.stderr
    assert "%" not in r.stdout  # the text alone on stdout


def test_stream_never_emits_half_characters():
    tok = Tokenizer(TINY_GPT2 / "tokenizer.json")
    text = "今天天气很好 🙂 café naïve — 床前明月光"
    ids = tok.encode(text)
    assert len(ids) > len(text)  # characters really are split across byte tokens
    stream = TextStream(tok)
    pieces = [stream.push(i) for i in ids] + [stream.flush()]
    assert "".join(pieces) == text
    assert not any("\ufffd" in p for p in pieces)


def test_ctrl_c_keeps_partial_text_prints_stats_exits_130(cli, monkeypatch):
    from tfcli.engine.model import Transformer

    real = Transformer.forward
    interrupt_call(monkeypatch, Transformer, "forward", 6)
    r = cli("generate", "-m", TINY_GPT2, "The", "-n", "50", "-t", "0")
    assert r.exit_code == 130
    monkeypatch.setattr(Transformer, "forward", real)
    full = cli("generate", "-m", TINY_GPT2, "The", "-n", "5", "-t", "0")
    assert r.stdout == full.stdout  # the 5 tokens produced before Ctrl-C were kept
    assert "5 new" in r.stderr and "interrupted" in r.stderr
    assert "Traceback" not in r.stderr


@pytest.mark.parametrize(
    "args, code, needles",
    [
        (["--temperature", "-1"], 2, ["--temperature", "0 or more"]),
        (["--top-p", "0"], 2, ["--top-p", "(0, 1]"]),
        (["--top-p", "1.5"], 2, ["--top-p"]),
        (["--top-k", "-3"], 2, ["--top-k"]),
        (["--min-p", "1"], 2, ["--min-p"]),
        (["--repetition-penalty", "0"], 2, ["--repetition-penalty"]),
        (["--max-tokens", "0"], 2, ["--max-tokens"]),
        (["--max-tokens", "1000"], 2, ["--max-tokens", "or fewer"]),
        (["--temperature", "warm"], 2, ["--temperature"]),
        (["--show-probs", "-1"], 2, ["--show-probs"]),
    ],
)
def test_bad_options_one_line_exit_2(cli, args, code, needles):
    one_line_error(cli("generate", "-m", TINY_GPT2, "Hello", *args), code, *needles)


def test_prompt_longer_than_context(cli):
    long = "word " * 400  # far more than the 128-token context
    one_line_error(cli("generate", "-m", TINY_GPT2, long), 2, "context", "--truncate")
    r = cli("generate", "-m", TINY_GPT2, long, "--truncate", "-n", "8", "--seed", "0")
    assert r.exit_code == 0
    assert "warning" in r.stderr and "keeping its last 121" in r.stderr


def test_empty_prompt(cli):
    one_line_error(cli("generate", "-m", TINY_GPT2, ""), 2, "empty")


def test_unknown_model_suggests_closest(cli):
    one_line_error(cli("generate", "-m", "shakespear", "Hi"), 1, "unknown model 'shakespear'")


def test_folder_without_config(cli, tmp_path):
    one_line_error(cli("generate", "-m", tmp_path, "Hi"), 1, "config.json")


def test_missing_folder(cli, tmp_path):
    one_line_error(cli("generate", "-m", tmp_path / "nope", "Hi"), 1, "no such folder")


def _copy(tmp_path, src=TINY_GPT2):
    dst = tmp_path / "model"
    shutil.copytree(src, dst)
    return dst


def test_truncated_safetensors(cli, tmp_path):
    m = _copy(tmp_path)
    data = (m / "model.safetensors").read_bytes()
    (m / "model.safetensors").write_bytes(data[: len(data) // 2])
    one_line_error(cli("generate", "-m", m, "Hi"), 1, "model.safetensors", "truncated")


def test_corrupt_safetensors_header(cli, tmp_path):
    m = _copy(tmp_path)
    data = bytearray((m / "model.safetensors").read_bytes())
    data[8:12] = b"\xff\xfe{["
    (m / "model.safetensors").write_bytes(bytes(data))
    one_line_error(cli("generate", "-m", m, "Hi"), 1, "not valid JSON")


def test_tensor_of_the_wrong_shape(cli, tmp_path):
    m = _copy(tmp_path)
    cfg = json.loads((m / "config.json").read_text())
    cfg["n_inner"] = 128  # the checkpoint's MLP is 4 x 64 = 256 wide
    (m / "config.json").write_text(json.dumps(cfg))
    one_line_error(cli("generate", "-m", m, "Hi"), 1, "mlp.c_fc.weight", "shape", "[64, 256]", "[64, 128]")


def test_model_by_name_from_weights_folder(cli):
    from tfcli.store.registry import shipped_models

    if "shakespeare" not in shipped_models():
        pytest.skip("weights/shakespeare is not trained yet")
    r = cli("generate", "ROMEO:", "-n", "20", "--seed", "0")
    assert r.exit_code == 0 and len(r.stdout.strip()) > 0


def test_slide_goes_on_past_the_context(cli):
    """--slide: a 128-token model writes 300 tokens, starting again from the recent half when full."""
    r = cli("generate", "-m", TINY_GPT2, "The", "-n", "300", "--seed", "0", "--slide")
    assert r.exit_code == 0, r.stderr
    assert "300 new" in r.stderr and "context slid" in r.stderr


def test_a_slide_continues_from_the_recent_half():
    """After a slide the next logits are those of the kept window run from position 0."""
    import numpy as np

    from tfcli.store import load
    from tfcli.engine.generate import Generation, Session
    from tfcli.engine.sampling import Sampler, SamplingParams

    m = load(TINY_GPT2)
    prompt = m.tokenizer.encode("The")
    session = Session(m.model, capacity=16)
    gen = Generation(session, m.tokenizer, prompt, Sampler(SamplingParams(temperature=0)), 40, slide=True)
    tokens = [s.token for s in gen]
    assert len(tokens) == 40 and gen.stats.slides >= 2
    # replay: the window the session holds now must be the last 8 + tokens since the last slide
    history = prompt + tokens[:-1]
    held = session.tokens
    assert held == history[-len(held):] and len(held) <= 16
    fresh, _ = Session(m.model).prefill(held)
    assert int(np.argmax(fresh)) == tokens[-1]


def test_truncate_keeps_the_bos_in_front():
    """--truncate keeps a prompt's last tokens and, in front of them, the BOS its tokenizer put first."""
    from tfcli.cli.generate import _fit_context

    ids = [1] + list(range(10, 30))  # a BOS, then 20 tokens of text
    assert _fit_context(ids, 8, 3, True, "m", lead=1) == [1, 25, 26, 27, 28, 29]  # 6 kept: 8 - 3 + 1
    assert _fit_context(ids, 8, 3, True, "m") == [24, 25, 26, 27, 28, 29]
    assert _fit_context(ids, 30, 3, True, "m", lead=1) == ids  # it fits: nothing cut


def test_show_probs_always_shows_the_chosen_token(cli):
    """At a high temperature with no filters the draw often falls outside the top 1: it is shown
    anyway, after a ⋮, with its probabilities."""
    r = cli("generate", "-m", TINY_GPT2, "The", "-n", "12", "--show-probs", "1", "-t", "5", "--top-k", "0", "--top-p", "1", "--min-p", "0", "--seed", "0")
    assert r.exit_code == 0, r.stderr
    steps = r.stderr.split("chose")[1:]
    assert len(steps) == 12
    assert all("▶" in s for s in steps)  # every step marks its chosen row
    outside = [s for s in steps if "⋮" in s]
    assert outside and all(s.index("⋮") < s.index("▶") for s in outside)


def test_show_probs_header_names_every_active_filter_and_counts_have_separators(cli, monkeypatch):
    r = cli("generate", "-m", "tang", "春", "-n", "1", "--show-probs", "3", "-t", "0.9", "--top-k", "0", "--top-p", "1", "--min-p", "0", "--seed", "0")
    assert r.exit_code == 0, r.stderr
    assert "9,275 candidates" in r.stderr  # the whole vocabulary survives no filters
    r = cli("generate", "-m", TINY_GPT2, "The", "-n", "1", "--show-probs", "3", "-t", "0.8", "--top-k", "40", "--top-p", "0.9", "--min-p", "0.05", "--repeat-penalty", "1.1", "--seed", "0")
    assert "repeat-penalty" in r.stderr  # at 80 columns the header wraps; at 200 it is one line:
    monkeypatch.setenv("COLUMNS", "200")
    r = cli("generate", "-m", TINY_GPT2, "The", "-n", "1", "--show-probs", "3", "-t", "0.8", "--top-k", "40", "--top-p", "0.9", "--min-p", "0.05", "--repeat-penalty", "1.1", "--seed", "0")
    header = next(line for line in r.stderr.splitlines() if "sampled" in line)
    for part in ("T=0.8", "top-k 40", "top-p 0.9", "min-p 0.05", "repeat-penalty 1.1 over 64"):
        assert part in header, header
    r = cli("generate", "-m", TINY_GPT2, "The", "-n", "1", "--show-probs", "3", "-t", "0")
    assert "sampled (greedy)" in r.stderr
