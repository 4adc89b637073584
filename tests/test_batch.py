"""Several samples in one batch (engine/batch.py, generate --samples / lists): batching changes no numbers."""

from __future__ import annotations

import dataclasses

import numpy as np

from tfcli.engine.executor import PLAIN
from tfcli.engine.fast.run.fast_executor import Fast
import pytest

from conftest import TINY_GPT2, TINY_LLAMA, assert_f32_near, decoded_alone, interrupt_call, one_line_error
from tfcli.engine.batch import Samples
from tfcli.engine.kvcache import BatchCache
from tfcli.engine.generate import Generation, Session
from tfcli.engine.sampling import Sampler, SamplingParams
from tfcli.store import load
from tfcli.engine.fast import FAST


@pytest.fixture(scope="module", params=[TINY_GPT2, TINY_LLAMA], ids=["gpt2", "llama"])
def lm(request):
    return load(request.param)


@pytest.mark.parametrize("workers", [1, 2], ids=["1-thread", "2-threads"])
def test_each_row_of_a_batched_step_equals_the_sequence_alone(lm, workers):
    """With 2 workers a second thread takes half of every product and half of every MLP."""
    model, rng = lm.model, np.random.default_rng(0)
    prompt = rng.integers(0, model.config.vocab_size, 7)
    seqs = rng.integers(0, model.config.vocab_size, (4, 5))  # [B, steps]: each row its own tokens
    cache = model.new_cache(20)
    model.forward(prompt, cache, run=FAST)
    batch = BatchCache(model.config, len(seqs), 20)
    batch.fill(cache)
    # Each sequence alone, all its positions in one pass: [steps, V] each.
    alone = [model.forward(np.concatenate([prompt, s]), model.new_cache(20), all_logits=True, run=FAST)[len(prompt) :] for s in seqs]
    for t in range(seqs.shape[1]):
        rows = model.decode_batch(seqs[:, t], batch, Fast(workers, batch=True))  # [B, V]
        for b in range(len(seqs)):
            assert_f32_near(rows[b], alone[b][t])


@pytest.mark.parametrize("workers", [1, 2], ids=["1-thread", "2-threads"])
def test_a_batch_of_samples_steps_each_row_as_alone_to_the_bit(lm, workers):
    """generate --samples's executor (fast.executor.RowByRow, BLAS on one thread with 2 workers): each
    row of a step equals, bit for bit, its sequence decoding one token at a time alone."""
    from tfcli.engine.fast.run.fast_executor import RowByRow
    from tfcli.engine.threads import new_helper

    model, rng = lm.model, np.random.default_rng(2)
    prompt = rng.integers(0, model.config.vocab_size, 6)
    seqs = rng.integers(0, model.config.vocab_size, (4, 5))  # [B, steps]
    cache = model.new_cache(20)
    model.forward(prompt, cache, run=FAST)
    batch = BatchCache(model.config, len(seqs), 20)
    batch.fill(cache)
    alone = [decoded_alone(model, prompt, s, 20) for s in seqs]  # [V] per step
    run = RowByRow(workers, new_helper() if workers > 1 else None)
    for t in range(seqs.shape[1]):
        with run.around_step(len(seqs)):
            rows = model.decode_batch(seqs[:, t], batch, run)  # [B, V]
        for b in range(len(seqs)):
            np.testing.assert_array_equal(rows[b], alone[b][t])


def test_rows_that_leave_the_batch_do_not_disturb_the_others(lm):
    model, rng = lm.model, np.random.default_rng(1)
    prompt = rng.integers(0, model.config.vocab_size, 3)
    seqs = rng.integers(0, model.config.vocab_size, (3, 4))
    cache = model.new_cache(10)
    model.forward(prompt, cache, run=FAST)
    batch = BatchCache(model.config, 3, 10)
    batch.fill(cache)
    model.decode_batch(seqs[:, 0], batch, run=FAST)
    model.decode_batch(seqs[:, 1], batch, run=FAST)
    batch.keep([0, 2])  # sample 1 finished
    rows = model.decode_batch(seqs[[0, 2], 2], batch, run=FAST)  # [2, V]
    for row, b in enumerate([0, 2]):
        alone = model.forward(np.concatenate([prompt, seqs[b, :3]]), model.new_cache(10), run=FAST)[-1]
        assert_f32_near(rows[row], alone)


def test_a_sample_of_a_batch_is_the_sample_alone_with_its_seed(lm):
    prompt = lm.tokenizer.prompt("The")
    params = [SamplingParams(temperature=t, top_k=0, top_p=1.0, min_p=0.0, seed=10 + i) for i, t in enumerate([0.5, 1.0, 1.5, 1.0])]
    batch = Samples(Session(lm.model), lm.tokenizer, prompt, [Sampler(p) for p in params], 25, eos_ids=lm.config.eos_token_ids)
    got = [[] for _ in params]
    for steps in batch:
        for i, step in steps:
            got[i].append(step.token)
    for i, p in enumerate(params):
        alone = Generation(Session(lm.model), lm.tokenizer, prompt, Sampler(p), 25, eos_ids=lm.config.eos_token_ids)
        assert got[i] == [s.token for s in alone], i
    assert len({tuple(g) for g in got}) > 1  # the samples really differ
    assert batch.totals.new_tokens == sum(map(len, got))


def test_each_sample_stops_on_its_own(lm):
    """A stop string ends one sample and the others go on; each text is the one it gives alone."""
    prompt = lm.tokenizer.prompt("The")
    params = [SamplingParams(temperature=1.0, seed=s) for s in range(4)]
    first = "".join(s.text for s in Generation(Session(lm.model), lm.tokenizer, prompt, Sampler(params[0]), 30))
    stop = (first[5:7],)
    batch = Samples(Session(lm.model), lm.tokenizer, prompt, [Sampler(p) for p in params], 30, stop=stop)
    texts = [""] * len(params)
    for steps in batch:
        for i, step in steps:
            texts[i] += step.text
    reasons = [run.stats.stop_reason for run in batch.runs]
    assert reasons[0] == "stop string"
    for i, p in enumerate(params):
        alone = Generation(Session(lm.model), lm.tokenizer, prompt, Sampler(p), 30, stop=stop)
        assert texts[i] == "".join(s.text for s in alone)
        assert reasons[i] == alone.stats.stop_reason


def test_the_servers_stepping_is_the_samples_one_over_slots(lm):
    """engine/batch.py's Batch over Slots, as tfcli serve steps it: prompts of different lengths,
    budgets and seeds, one joining after two steps; each row's tokens are its generation's alone."""
    from tfcli.engine.batch import Batch, Row
    from tfcli.engine.fast.run.fast_executor import RowByRow
    from tfcli.engine.slots import Slots

    prompts = [lm.tokenizer.prompt(t) for t in ("The", "Once upon a time there", "A")]
    params = [SamplingParams(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0, seed=s) for s in range(3)]
    budgets = [12, 5, 9]

    def generation(i):
        return Generation(Session(lm.model, capacity=40), lm.tokenizer, prompts[i], Sampler(params[i]), budgets[i])

    batch, got, step = Batch(lm.model, Slots([]), RowByRow()), [[], [], []], 0
    rows: dict[int, int] = {}  # id(row) -> its prompt

    def join(i):
        gen = generation(i)
        gen.begin()
        logits, _ = gen.session.prefill(prompts[i])  # [V]
        row = Row(gen, logits)
        rows[id(row)] = i
        batch.join(row, gen.session.cache)

    join(0)
    join(1)
    while batch.rows or step < 2:
        if step == 2:
            join(2)
        for row, s in batch.draw():
            got[rows[id(row)]].append(s.token)
        if batch.rows:
            batch.step()
        step += 1
    for i in range(3):
        assert got[i] == [s.token for s in generation(i)], i
    assert [len(g) for g in got] == budgets


def _greedy(cli, *args):
    r = cli("generate", "-m", TINY_LLAMA, "The", "-n", "20", *args)
    assert r.exit_code == 0, r.stderr
    return r


def test_three_greedy_samples_are_the_greedy_text(cli):
    plain = _greedy(cli, "-t", "0").stdout.rstrip("\n")
    r = _greedy(cli, "-t", "0", "--samples", "3")
    blocks = r.stdout.split("── sample ")[1:]
    assert len(blocks) == 3
    for block in blocks:
        assert block.split("──\n", 1)[1].rstrip("\n") == plain
    assert "3 samples in one batch" in r.stderr and "60 new in all" in r.stderr


def test_a_sample_of_a_temperature_list_is_that_run_alone_with_seed_plus_i(cli):
    r = _greedy(cli, "-t", "0.2,0.8,1.5", "--seed", "7")
    blocks = r.stdout.split("── sample ")[1:]
    assert [b.split(" ──")[0] for b in blocks] == ["1 · T=0.2 · seed 7", "2 · T=0.8 · seed 8", "3 · T=1.5 · seed 9"]
    for block, (t, s) in zip(blocks, [("0.2", "7"), ("0.8", "8"), ("1.5", "9")]):
        alone = _greedy(cli, "-t", t, "--seed", s).stdout.rstrip("\n")
        assert block.split("──\n", 1)[1].rstrip("\n") == alone


def test_samples_of_a_seed_are_seeds_in_a_row(cli):
    r = _greedy(cli, "-t", "1", "--samples", "2", "--seed", "3")
    texts = [b.split("──\n", 1)[1].rstrip("\n") for b in r.stdout.split("── sample ")[1:]]
    assert texts == [_greedy(cli, "-t", "1", "--seed", "3").stdout.rstrip("\n"), _greedy(cli, "-t", "1", "--seed", "4").stdout.rstrip("\n")]


def test_without_a_seed_the_base_seed_is_reported(cli):
    r = _greedy(cli, "-t", "1", "--samples", "2")
    assert "seed " in r.stdout.split("\n")[0]


def test_show_probs_draws_the_temperatures_side_by_side(cli):
    r = _greedy(cli, "-t", "0.2,1.5", "--show-probs", "3", "-n", "2", "--seed", "1")
    first = r.stderr.split("#2")[0]
    assert "T=0.2" in first and "T=1.5" in first and first.count("▶") == 2




@pytest.mark.parametrize(
    "args, code, needles",
    [
        (["--samples", "0"], 2, ["--samples", "at least 1"]),
        (["--samples", "-2"], 2, ["--samples"]),
        (["-t", "0.2,warm,1"], 2, ["--temperature", "'warm'"]),
        (["-t", "0.2,-1"], 2, ["--temperature", "0 or more"]),
        (["-t", "0.2,"], 2, ["--temperature", "''"]),
        (["--top-k", "5,x"], 2, ["--top-k", "not a valid integer"]),
        (["--top-p", "0.5,2"], 2, ["--top-p"]),
        (["-t", "1,2,3", "--top-k", "1,2"], 2, ["line up"]),
        (["--samples", "2", "--lookup"], 2, ["--lookup"]),
        (["--samples", "2", "--slide"], 2, ["--slide"]),
        (["--samples", "100000000000000"], 1, ["100,000,000,000,000 samples", "--samples"]),
    ],
)
def test_bad_batch_options_one_line(cli, args, code, needles):
    one_line_error(cli("generate", "-m", TINY_GPT2, "Hello", "-n", "5", *args), code, *needles)


def test_memory_is_checked_before_the_batch_is_allocated(cli, monkeypatch):
    import tfcli.engine.memory as memory

    made = []
    monkeypatch.setattr(memory, "available_bytes", lambda: 10_000_000)  # 10 MB
    monkeypatch.setattr(BatchCache, "__init__", lambda self, *a: made.append(a))
    monkeypatch.setattr(Sampler, "__init__", lambda self, *a: made.append(a))
    r = cli("generate", "-m", TINY_GPT2, "Hello", "-n", "50", "--samples", "5000")
    one_line_error(r, 1, "5,000 samples", "would need", "--samples")
    assert made == []  # no sampler, no cache: the check came first


def test_ctrl_c_in_a_batch_keeps_every_text_and_exits_130(cli, monkeypatch):
    from tfcli.engine.model import Transformer

    interrupt_call(monkeypatch, Transformer, "decode_batch", 4)
    r = cli("generate", "-m", TINY_LLAMA, "The", "-n", "30", "-t", "0", "--samples", "2")
    assert r.exit_code == 130
    assert r.stdout.count("── sample ") == 2
    assert "interrupted" in r.stderr and "4 new" in r.stderr and "Traceback" not in r.stderr


@pytest.mark.parametrize("t_len", [2, 3, 4, 8, 9, 16, 17, 32])
def test_the_product_for_a_few_rows_equals_the_plain_one(t_len):
    """dense_ops.linear and each_row for 2-32 rows (a batch step, a lookup check) on the stored rows, against the
    plain product: each_row on this thread or with a second thread taking half the blocks, with rows left after the
    last whole block, and on a slice of the stored rows' columns (half of an MLP's hidden units, as
    Transformer.block takes them)."""
    from concurrent.futures import ThreadPoolExecutor

    from tfcli.engine.fast.run import dense_ops as fast_ops
    from tfcli.engine.threads import ON_THIS_THREAD

    rng = np.random.default_rng(t_len)
    with ThreadPoolExecutor(1) as pool:
        for n_out, n_in in [(960, 576), (576, 1536), (5000, 96), (50257, 64), (7, 3)]:
            stored = rng.standard_normal((n_out, n_in), dtype=np.float32)  # [out, in], as a checkpoint keeps a Linear
            for w in (stored.T, stored[:, : n_in // 2 + 1].T):  # [in, out] views, the second of some columns only
                x = rng.standard_normal((t_len, w.shape[0]), dtype=np.float32)
                want = x.astype(np.float64) @ w.astype(np.float64)
                for got in (fast_ops.linear(x, w), *(fast_ops.each_row(x, w.T, h) for h in (None, ON_THIS_THREAD, pool))):
                    assert got.shape == want.shape and got.dtype == np.float32
                    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_an_error_in_the_second_thread_reaches_the_caller():
    from concurrent.futures import ThreadPoolExecutor

    from tfcli.engine.fast.run import dense_ops as fast_ops

    class Failing(ThreadPoolExecutor):
        def submit(self, fn, *args):
            return super().submit(lambda: (fn(*args), 1 / 0))

    x = np.ones((4, 96), dtype=np.float32)
    with Failing(1) as pool, pytest.raises(ZeroDivisionError):
        fast_ops.each_row(x, np.ones((5000, 96), dtype=np.float32), pool)


@pytest.mark.parametrize("split", [0, 1, 2, 37, 80, 81])
def test_the_mlp_is_the_sum_of_its_parts(lm, split):
    """The fast executor runs each share of the hidden units on its own thread and adds them:
    any split (uneven ones, and an empty part) adds up to the whole MLP, the bias counted once."""
    model, rng = lm.model, np.random.default_rng(split)
    F = model.config.d_ff
    h = rng.standard_normal((4, model.config.d_model), dtype=np.float32)
    for layer in model.layers:
        # The tiny checkpoints' biases are zeros: random ones, so that counting a bias twice shows.
        m = layer.mlp
        if m.b_out is not None:
            m = dataclasses.replace(m, b_in=rng.standard_normal(m.b_in.shape, dtype=np.float32), b_out=rng.standard_normal(m.b_out.shape, dtype=np.float32))
        whole = PLAIN.mlp(h, m)  # [T, D]
        parts = m.part_out(h, 0, split, PLAIN.linear) + m.part_out(h, split, F, PLAIN.linear)
        assert_f32_near(parts, whole)


@pytest.mark.parametrize("t_len", [2, 5, 16])
def test_a_short_pass_on_two_threads_equals_one_thread(lm, t_len):
    """A lookup check or a short prompt (2-16 tokens) shares its products between two threads."""
    model, rng = lm.model, np.random.default_rng(t_len)
    prompt, tokens = rng.integers(0, model.config.vocab_size, 6), rng.integers(0, model.config.vocab_size, t_len)
    got = []
    for workers in (1, 2):
        cache = model.new_cache(40)
        model.forward(prompt, cache, run=FAST)
        got.append(model.forward(tokens, cache, all_logits=True, run=Fast(workers)))  # [T, V]
    assert_f32_near(got[1], got[0])


def test_importing_tfcli_shortens_openblas_spinning_unless_set():
    """tfcli/__init__.py sets OPENBLAS_THREAD_TIMEOUT before NumPy loads OpenBLAS (its spinning
    idle threads slowed the two-thread products); a value the user set is kept."""
    import subprocess
    import sys

    show = "import os, tfcli; print(os.environ['OPENBLAS_THREAD_TIMEOUT'])"
    env = {k: v for k, v in __import__("os").environ.items() if k != "OPENBLAS_THREAD_TIMEOUT"}
    assert subprocess.run([sys.executable, "-c", show], env=env, capture_output=True, text=True).stdout.strip() == "20"
    env["OPENBLAS_THREAD_TIMEOUT"] = "26"
    assert subprocess.run([sys.executable, "-c", show], env=env, capture_output=True, text=True).stdout.strip() == "26"
