"""Constrained decoding measured: what a JSON schema's mask costs a decode step, and the grammar
libraries it could use.

`decode`: the same model greedy-decodes --tokens tokens of a chat answer, free and under a JSON
schema (an array of strings: a long answer the grammar keeps open), one after the other in turn
(which goes first alternates by round), --rounds times in one process, through the engine's
Generation as `tfcli generate` runs it. Prints each round's decode speed both ways and their
ratio, the median and range, the grammar's own time per token (its mask and its advance, timed
apart), and the load average at the start and the end (the machine may be shared: compare the
ratio, not the speeds). Issue 54's target: at most 10% slower under the schema.

    python benchmarks/grammar.py decode -m smollm2 --rounds 5 --tokens 64

`LIB MODEL_FOLDER` (the comparison that chose llguidance): import time, the vocabulary's
preparation, build time per JSON schema, and the time of each token's mask along a valid answer
(then the token taken). One library per process:

    pip install --target /tmp/llg llguidance; PYTHONPATH=/tmp/llg python benchmarks/grammar.py llg MODEL_FOLDER
    ... xg (xgrammar: needs torch), oc (outlines-core: regular expressions only, schemas made regexes)

MODEL_FOLDER holds the tokenizer.json (SmolLM2's: 49,152 tokens, byte-level BPE). Figures in README.md.
"""

import json
import os
import statistics
import sys
import time

SCHEMA = {
    "type": "object",
    "required": ["items"],
    "properties": {"items": {"type": "array", "items": {"type": "string", "maxLength": 24}, "minItems": 40}},
}
ASK = "List forty animals as a JSON object."


def decode(model: str, rounds: int, tokens: int) -> None:
    from tfcli.engine.generate import Generation, Session
    from tfcli.engine.grammar import compile_grammar
    from tfcli.engine.sampling import Sampler, SamplingParams
    from tfcli.store import load

    lm = load(model)
    text = lm.chat.render([{"role": "user", "content": ASK}], True) if lm.chat else ASK + "\n"
    ids = lm.tokenizer.encode(text)
    grammar = compile_grammar("json_schema", json.dumps(SCHEMA), lm.tokenizer, lm.config.vocab_size, ())

    class Timed:  # the grammar's own time per token: its mask (allowed) and its advance
        def __init__(self, c):
            self.c, self.seconds = c, 0.0

        def allowed(self):
            t0 = time.perf_counter()
            try:
                return self.c.allowed()
            finally:
                self.seconds += time.perf_counter() - t0

        def advance(self, token):
            t0 = time.perf_counter()
            self.c.advance(token)
            self.seconds += time.perf_counter() - t0

        @property
        def finished(self):
            return self.c.finished

    def run(constrained: bool) -> tuple[float, float]:
        c = Timed(grammar.start()) if constrained else None
        gen = Generation(Session(lm.model), lm.tokenizer, ids, Sampler(SamplingParams(temperature=0)), tokens,
                         eos_ids=(), constraint=c)  # fmt: skip
        for _ in gen:
            pass
        assert gen.stats.new_tokens == tokens, gen.stats
        return gen.stats.decode_tps, (c.seconds / tokens * 1e3 if c else 0.0)

    print(f"{model}: {len(ids)} prompt tokens, {tokens} new, greedy; load average at start: {_load()}")
    run(True), run(False)  # warm: compiled kernels, the library's first masks
    free, held, ratio, grammar_ms = [], [], [], []
    for r in range(rounds):
        order = (False, True) if r % 2 == 0 else (True, False)
        got = {c: run(c) for c in order}
        free.append(got[False][0])
        held.append(got[True][0])
        grammar_ms.append(got[True][1])
        ratio.append(held[-1] / free[-1])
        print(f"round {r + 1}: free {free[-1]:5.1f} tok/s, under the schema {held[-1]:5.1f} tok/s "
              f"({ratio[-1]:.3f}x), the grammar {grammar_ms[-1]:.2f} ms/token; load {_load()}")  # fmt: skip
    def spread(xs: list[float], f: str) -> str:
        return f"{statistics.median(xs):{f}} ({min(xs):{f}}-{max(xs):{f}})"

    print(f"median (range): free {spread(free, '.1f')} tok/s, under the schema {spread(held, '.1f')} tok/s, "
          f"ratio {spread(ratio, '.3f')}x, the grammar {statistics.median(grammar_ms):.2f} ms/token")  # fmt: skip
    print(f"load average at the end: {_load()}")


def _load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def libraries(lib: str, folder: str) -> None:
    TOK = folder + "/tokenizer.json"
    from tokenizers import Tokenizer

    hf = Tokenizer.from_file(TOK)
    V = 49152
    EOS = 2
    SCHEMAS = [
        (
            {
                "type": "object",
                "properties": {"name": {"type": "string"}, "age": {"type": "integer", "minimum": 0, "maximum": 150}},
                "required": ["name", "age"],
            },
            {"name": "Ada Lovelace", "age": 36},
        ),
        (
            {
                "type": "object",
                "properties": {
                    "city": {"type": "string", "enum": ["Paris", "London", "Tokyo"]},
                    "temps": {"type": "array", "items": {"type": "number"}, "minItems": 2, "maxItems": 5},
                    "meta": {
                        "type": "object",
                        "properties": {"source": {"type": "string", "pattern": "^[a-z]+$"}, "ok": {"type": "boolean"}},
                        "required": ["source"],
                    },
                },
                "required": ["city", "temps", "meta"],
            },
            {"city": "Tokyo", "temps": [12.5, 14.0, 9.75], "meta": {"source": "station", "ok": True}},
        ),
        (
            {
                "type": "object",
                "properties": {
                    "items": {
                        "type": "array",
                        "items": {
                            "type": "object",
                            "properties": {
                                "sku": {"type": "string", "pattern": "^[A-Z]{3}-[0-9]{4}$"},
                                "qty": {"type": "integer"},
                                "price": {"type": "number"},
                            },
                            "required": ["sku", "qty"],
                        },
                        "minItems": 1,
                        "maxItems": 4,
                    },
                    "note": {"type": "string"},
                },
                "required": ["items"],
            },
            {
                "items": [{"sku": "ABC-1234", "qty": 2, "price": 9.99}, {"sku": "XYZ-0001", "qty": 1}],
                "note": "leave at the door",
            },
        ),
    ]

    def byte_vocab():

        from tfcli.json_shapes import byte_decoder

        inv = byte_decoder()  # byte-level BPE pieces -> bytes (GPT-2's printable stand-ins)
        special = {int(i) for i, t in hf.get_added_tokens_decoder().items() if t.special}
        out = []
        for i in range(V):
            p = hf.id_to_token(i)
            if p is None:
                out.append(b"")
                continue
            if i in special:
                out.append(b"\xff" + p.encode())
                continue
            out.append(bytes(inv[c] for c in p))
        return out, special

    t0 = time.perf_counter()
    if lib == "llg":
        import llguidance as llg
        from llguidance.numpy import allocate_token_bitmask, fill_next_token_bitmask

        t_imp = time.perf_counter() - t0
        t0 = time.perf_counter()
        tok = llg.LLTokenizer(open(TOK).read(), n_vocab=V, eos_token=EOS)
        t_tok = time.perf_counter() - t0

        def build(schema):
            g = llg.LLMatcher.grammar_from_json_schema(json.dumps(schema))
            m = llg.LLMatcher(tok, g)
            assert not m.is_error(), m.get_error()
            return m

        mask = allocate_token_bitmask(1, V)

        def step(m, t):
            fill_next_token_bitmask(m, mask)
            assert (mask[0, t // 32] >> (t % 32)) & 1, t
            assert m.consume_token(t)
    elif lib == "xg":
        import torch  # noqa: F401 - xgrammar's own dependency, counted in its import time
        import xgrammar as xgr

        t_imp = time.perf_counter() - t0
        t0 = time.perf_counter()
        vocab, special = byte_vocab()
        info = xgr.TokenizerInfo(
            [b if not b.startswith(b"\xff") else b"" for b in vocab],
            xgr.VocabType.RAW,
            vocab_size=V,
            stop_token_ids=[EOS],
        )
        comp = xgr.GrammarCompiler(info, max_threads=1, cache_enabled=False)
        t_tok = time.perf_counter() - t0

        def build(schema):
            c = comp.compile_json_schema(json.dumps(schema), strict_mode=True)
            return xgr.GrammarMatcher(c)

        mask = xgr.allocate_token_bitmask(1, V)

        def step(m, t):
            m.fill_next_token_bitmask(mask)
            assert (int(mask[0, t // 32]) >> (t % 32)) & 1, t
            assert m.accept_token(t)
    elif lib == "oc":
        import outlines_core as oc
        from outlines_core.json_schema import build_regex_from_schema

        t_imp = time.perf_counter() - t0
        t0 = time.perf_counter()
        vocab, special = byte_vocab()
        d = {}
        for i, b in enumerate(vocab):
            if i == EOS or i in special or not b:
                continue
            d.setdefault(b, []).append(i)
        voc = oc.Vocabulary(EOS, d)
        t_tok = time.perf_counter() - t0

        def build(schema):
            return [oc.Index(build_regex_from_schema(json.dumps(schema)), voc), None]

        def step(m, t):
            idx, s = m
            s = idx.get_initial_state() if s is None else s
            allowed = idx.get_allowed_tokens(s)
            assert t in allowed
            m[1] = idx.get_next_state(s, t)

    builds, masks = [], []
    for schema, inst in SCHEMAS:
        text = json.dumps(inst, separators=(",", ":")) if lib == "oc" else json.dumps(inst)
        ids = hf.encode(text, add_special_tokens=False).ids
        t0 = time.perf_counter()
        m = build(schema)
        builds.append(time.perf_counter() - t0)
        for t in ids:
            t0 = time.perf_counter()
            step(m, t)
            masks.append(time.perf_counter() - t0)
    print(
        json.dumps(
            {
                "lib": lib,
                "import_s": round(t_imp, 3),
                "vocab_s": round(t_tok, 3),
                "build_ms": [round(b * 1e3, 1) for b in builds],
                "mask_ms_median": round(statistics.median(masks) * 1e3, 3),
                "mask_ms_mean": round(statistics.mean(masks) * 1e3, 3),
                "mask_ms_max": round(max(masks) * 1e3, 2),
                "tokens": len(masks),
            }
        )
    )


if __name__ == "__main__":
    if sys.argv[1:2] == ["decode"]:
        import argparse

        ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
        ap.add_argument("what", choices=["decode"])
        ap.add_argument("-m", "--model", default="smollm2")
        ap.add_argument("--rounds", type=int, default=5)
        ap.add_argument("--tokens", type=int, default=64)
        a = ap.parse_args()
        decode(a.model, a.rounds, a.tokens)
    else:
        libraries(sys.argv[1], sys.argv[2])
