"""The grammar libraries constrained decoding could use, measured on one vocabulary: import time,
the vocabulary's preparation, build time per JSON schema, and the time of each token's mask along a
valid answer (then the token taken). One library per process:

    pip install --target /tmp/llg llguidance; PYTHONPATH=/tmp/llg python benchmarks/grammar.py llg MODEL_FOLDER
    ... xg (xgrammar: needs torch), oc (outlines-core: regular expressions only, schemas made regexes)

MODEL_FOLDER holds the tokenizer.json (SmolLM2's: 49,152 tokens, byte-level BPE). Figures in README.md.
"""
import json, sys, time, statistics as st
lib = sys.argv[1]
TOK = sys.argv[2] + "/tokenizer.json"
from tokenizers import Tokenizer
hf = Tokenizer.from_file(TOK)
V = 49152
EOS = 2
SCHEMAS = [
 ({"type":"object","properties":{"name":{"type":"string"},"age":{"type":"integer","minimum":0,"maximum":150}},"required":["name","age"]},
  {"name":"Ada Lovelace","age":36}),
 ({"type":"object","properties":{"city":{"type":"string","enum":["Paris","London","Tokyo"]},"temps":{"type":"array","items":{"type":"number"},"minItems":2,"maxItems":5},
   "meta":{"type":"object","properties":{"source":{"type":"string","pattern":"^[a-z]+$"},"ok":{"type":"boolean"}},"required":["source"]}},"required":["city","temps","meta"]},
  {"city":"Tokyo","temps":[12.5,14.0,9.75],"meta":{"source":"station","ok":True}}),
 ({"type":"object","properties":{"items":{"type":"array","items":{"type":"object","properties":{"sku":{"type":"string","pattern":"^[A-Z]{3}-[0-9]{4}$"},"qty":{"type":"integer"},"price":{"type":"number"}},"required":["sku","qty"]},"minItems":1,"maxItems":4},
   "note":{"type":"string"}},"required":["items"]},
  {"items":[{"sku":"ABC-1234","qty":2,"price":9.99},{"sku":"XYZ-0001","qty":1}],"note":"leave at the door"}),
]
def byte_vocab():
    from tokenizers import decoders
    # byte-level BPE pieces -> bytes (GPT-2's printable stand-ins)
    bs = list(range(ord("!"), ord("~")+1))+list(range(ord("¡"), ord("¬")+1))+list(range(ord("®"), ord("ÿ")+1))
    cs = bs[:]; n = 0
    for b in range(256):
        if b not in bs: bs.append(b); cs.append(256+n); n += 1
    inv = {chr(c): b for b, c in zip(bs, cs)}
    special = {int(i) for i, t in hf.get_added_tokens_decoder().items() if t.special}
    out = []
    for i in range(V):
        p = hf.id_to_token(i)
        if p is None: out.append(b""); continue
        if i in special: out.append(b"\xff" + p.encode()); continue
        out.append(bytes(inv[c] for c in p))
    return out, special

t0 = time.perf_counter()
if lib == "llg":
    import llguidance as llg, numpy as np
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
    import xgrammar as xgr, torch
    t_imp = time.perf_counter() - t0
    t0 = time.perf_counter()
    vocab, special = byte_vocab()
    info = xgr.TokenizerInfo([b if not b.startswith(b"\xff") else b"" for b in vocab], xgr.VocabType.RAW, vocab_size=V, stop_token_ids=[EOS])
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
        if i == EOS or i in special or not b: continue
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
    t0 = time.perf_counter(); m = build(schema); builds.append(time.perf_counter() - t0)
    for t in ids:
        t0 = time.perf_counter(); step(m, t); masks.append(time.perf_counter() - t0)
print(json.dumps({"lib": lib, "import_s": round(t_imp, 3), "vocab_s": round(t_tok, 3), "build_ms": [round(b*1e3, 1) for b in builds],
                  "mask_ms_median": round(st.median(masks)*1e3, 3), "mask_ms_mean": round(st.mean(masks)*1e3, 3), "mask_ms_max": round(max(masks)*1e3, 2), "tokens": len(masks)}))
