"""The KV cache's numbers (engine/kvcache.py, KV_TYPES; --kv-type): float16 halves the cache, rounds
each key and value once when it is written, and reads it back exactly, on the NumPy paths and on the
compiled attention (fast/source/attention_job.py), the compiled blocks, a batch and a server's rows.

Tolerances: a float16 key carries 11 significant bits (a relative error of at most 2^-11 = 4.9e-4);
the logits of a tiny random model move by a small multiple of that times their scale."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import TINY_GPT2, one_line_error

from tfcli.engine.errors import UsageError
from tfcli.engine.kvcache import KV_TYPES, BatchCache, KVCache, kv_bytes, kv_dtype
from tfcli.store import load

HALF = 2.0**-11  # float16's relative rounding


@pytest.fixture(scope="module")
def tiny():
    return load(TINY_GPT2).model


def test_the_f16_cache_holds_half_the_bytes_of_the_f32_one(tiny):
    cfg = tiny.config
    for n in (1, 100, cfg.n_ctx):
        assert 2 * kv_bytes(cfg, n, "f16") == kv_bytes(cfg, n, "f32") == cfg.kv_cache_bytes(n)
    caches = {t: KVCache(cfg, cfg.n_ctx, t) for t in KV_TYPES}
    for c in caches.values():
        c.reserve(cfg.n_ctx)  # every position allocated
    held = {t: c.k.nbytes + c.v.nbytes + c.ks.nbytes + c.vs.nbytes for t, c in caches.items()}
    assert held["f32"] == kv_bytes(cfg, cfg.n_ctx, "f32") == 2 * held["f16"]
    assert caches["f16"].k.dtype == np.float16 and caches["f32"].k.dtype == np.float32
    batch = BatchCache(cfg, 3, 16, "f16")
    assert batch.k.nbytes + batch.v.nbytes == 3 * kv_bytes(cfg, 16, "f16")


def test_a_float_model_keeps_float32_unless_asked(tiny):
    assert not tiny.quantized() and tiny.cache_type() == "f32" and tiny.new_cache(8).k.dtype == np.float32
    tiny.kv_type = "f16"
    try:
        assert tiny.new_cache(8).k.dtype == np.float16
    finally:
        tiny.kv_type = None


def test_an_unknown_type_is_a_one_line_usage_error():
    with pytest.raises(UsageError, match="use one of f32, f16"):
        kv_dtype("f8")


def test_the_f16_cache_is_the_f32_one_rounded_and_its_logits_near(tiny):
    """A prompt pass then decode steps: the float16 cache holds the float32 one's numbers rounded to
    nearest (the keys a pass writes are the same whichever cache it reads), and the logits stay within
    a few float16 roundings of the float32 cache's."""
    from tfcli.engine.fast.run.fast_executor import FAST

    ids = np.random.default_rng(0).integers(0, tiny.config.vocab_size, 40)
    out = {}
    for t in KV_TYPES:
        cache = KVCache(tiny.config, 48, t)
        logits = [tiny.forward(ids[:32], cache, run=FAST)[-1]]  # [V]
        logits += [tiny.forward(ids[i : i + 1], cache, run=FAST)[-1] for i in range(32, 40)]
        out[t] = np.array(logits), cache  # [9, V]
    (l32, c32), (l16, c16) = out["f32"], out["f16"]
    # block 0's keys and values come before any rounded one is read: the float32 ones, rounded to nearest
    assert np.array_equal(c16.k[0, :, :40], c32.k[0, :, :40].astype(np.float16))
    assert np.array_equal(c16.v[0, :, :40], c32.v[0, :, :40].astype(np.float16))
    near = np.abs(c16.k[:, :, :40].astype(np.float32) - c32.k[:, :, :40])  # later keys: inputs moved a little
    assert near.max() <= 64 * HALF * np.abs(c32.k[:, :, :40]).max()
    scale = np.abs(l32).max()
    assert 0 < np.abs(l16 - l32).max() <= 64 * HALF * scale
    assert (l16.argmax(-1) == l32.argmax(-1)).all()


def test_a_copied_cache_keeps_its_type(tiny):
    c = KVCache(tiny.config, 16, "f16")
    tiny.forward(np.arange(5), c)
    d = c.copy(32)
    assert d.k.dtype == np.float16 and d.kv_type == "f16" and np.array_equal(d.k[:, :, :5], c.k[:, :, :5])


@pytest.mark.parametrize("flag", ["f8", "F16"])
def test_a_bad_kv_type_flag_is_one_line(cli, flag):
    one_line_error(cli("score", "-m", TINY_GPT2, "--kv-type", flag, "Hello there"), 2, "--kv-type")


def test_score_and_bench_take_the_flag(cli):
    import json

    got = {t: json.loads(cli("score", "-m", TINY_GPT2, "--kv-type", t, "--json", "To be, or not to be").stdout)
           for t in KV_TYPES}
    assert got["f16"]["perplexity"] != got["f32"]["perplexity"]
    assert abs(got["f16"]["perplexity"] / got["f32"]["perplexity"] - 1) < 1e-2
    r = cli("bench", "-m", TINY_GPT2, "--kv-type", "f16", "--prompts", "8", "-n", "4", "--runs", "1", "--json")
    doc = json.loads(r.stdout)
    assert doc["kv_type"] == "f16" and doc["kv_bytes"] == kv_bytes(load(TINY_GPT2).config, 20, "f16")


def test_generate_samples_take_the_flag(cli):
    """--samples decode together through a BatchCache of the session's type: greedy samples agree."""
    r = cli("generate", "-m", TINY_GPT2, "--kv-type", "f16", "--samples", "2", "-t", "0", "-n", "12", "ROMEO:")
    assert r.exit_code == 0, r.stderr
    texts = [t.split("\n", 1)[1].strip() for t in r.stdout.split("── sample")[1:]]  # each sample's text
    assert len(texts) == 2 and texts[0] == texts[1] and texts[0].startswith("ROMEO:")


def test_the_prompt_cache_keeps_and_gives_back_f16(tiny):
    """The server's prompt cache (serve/promptcache.py) stores copies of the caches it is given: an f16
    entry holds half the bytes of an f32 one and a hit continues in f16."""
    from tfcli.serve.promptcache import PromptCache

    ids = list(range(1, 13))
    sizes = {}
    for t in KV_TYPES:
        c = KVCache(tiny.config, 16, t)
        tiny.forward(np.array(ids), c)
        store = PromptCache(1 << 24)
        store.keep(ids, c)
        sizes[t] = store.used
        got, n = store.take(ids + [5], 32)
        assert n == 12 and got.kv_type == t and np.array_equal(got.k[:, :, :12], c.k[:, :, :12])
    assert sizes["f32"] == 2 * sizes["f16"]


class TestCompiled:
    """The compiled attention and blocks read and write a float16 cache."""

    @pytest.fixture(autouse=True)
    def _kernels(self, kernels):
        self.k = kernels

    @pytest.mark.parametrize("dh, n_kv, group, s_len", [(64, 3, 3, 100), (64, 1, 4, 37), (256, 1, 4, 300),
                                                         (48, 2, 2, 21)])
    def test_attention_on_f16_is_attention_on_its_numbers_widened(self, dh, n_kv, group, s_len):
        """vcvtph2ps widens exactly: the same bits as the float32 kernel on the widened cache (dh 48: the
        scalar path)."""
        rng = np.random.default_rng(dh + s_len)
        q = rng.standard_normal((n_kv, group, 1, dh)).astype(np.float32)  # [Hkv, G, 1, Dh]
        k = rng.standard_normal((n_kv, s_len, dh)).astype(np.float16)  # [Hkv, S, Dh]
        v = rng.standard_normal((n_kv, s_len, dh)).astype(np.float16)
        for threads in (1, 2):
            half = self.k.attention(q, k.transpose(0, 2, 1), v, threads)
            wide = self.k.attention(q, k.astype(np.float32).transpose(0, 2, 1), v.astype(np.float32), threads)
            assert np.array_equal(half, wide)

    def test_the_compiled_blocks_write_keys_rounded_as_numpy_does(self, tmp_path, monkeypatch):
        """A quantized model (f16 by default) decoding on the compiled blocks: its keys and values rounded
        to nearest, ties to even, as astype(float16) rounds the same step's float32 keys (the f32 cache's
        decode on the same path); its batch and server rows each equal the sequence alone."""
        from conftest import decoded_alone
        from test_compiled_blocks import BUILDERS

        from tfcli.engine.fast.run import fast_executor as executor
        from tfcli.engine.fast.run.fast_executor import Fast
        from tfcli.engine.quantized import quantize_weights
        from tfcli.engine.slots import Slots

        monkeypatch.setattr(executor, "KERNELS_FROM", 0)
        BUILDERS["llama3"](tmp_path)
        m = load(tmp_path).model
        quantize_weights(m, "q8_0")
        assert m.cache_type() == "f16"
        prompt = np.random.default_rng(3).integers(1, 300, 9)
        caches = {}
        for t in KV_TYPES:
            m.kv_type = t
            caches[t] = m.new_cache(32)
            m.forward(prompt, caches[t], run=Fast(2))
        c16, c32 = caches["f16"], caches["f32"]
        assert c16.k.dtype == np.float16
        # block 0's keys and values (written by the compiled blocks, vcvtps2ph): the f32 ones rounded by NumPy
        assert np.array_equal(c16.k[0, :, :9], c32.k[0, :, :9].astype(np.float16))
        assert np.array_equal(c16.v[0, :, :9], c32.v[0, :, :9].astype(np.float16))
        m.kv_type = "f16"
        nexts = np.array([17, 42])
        batch = BatchCache(m.config, 2, 32, "f16")
        batch.fill(c16)
        rows = m.decode_batch(nexts, batch, Fast(2, batch=True))  # [2, V]
        for b in range(2):
            assert np.array_equal(rows[b], decoded_alone(m, prompt, [nexts[b]])[0])
        other = m.new_cache(32)
        m.forward(prompt[:4], other, run=Fast(2))
        rows = m.decode_batch(nexts, Slots([c16, other]), Fast(2, batch=True))  # positions 9 and 4
        assert np.array_equal(rows[0], decoded_alone(m, prompt, [nexts[0]])[0])
        assert np.array_equal(rows[1], decoded_alone(m, prompt[:4], [nexts[1]])[0])
