"""tfcli embed: neighbours, analogies and similarities equal a brute-force NumPy computation over the
embedding matrix read straight from the safetensors file; an analogy whose answer is known by
construction; split words, --layer, --json keys and refusals."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import load_file

from conftest import TINY_GPT2, TINY_LLAMA
from tfcli.engine.fast import FAST

KEYS = {TINY_GPT2: "transformer.wte.weight", TINY_LLAMA: "model.embed_tokens.weight"}


def gguf_embedding(path: Path) -> np.ndarray:
    """token_embd.weight of a GGUF file as gguf-py reads and dequantizes it: [V, D]. Kept in
    pytest's cache under the file's SHA-256 and gguf-py's version: gguf-py's reader parses every
    metadata field before the first tensor (SmolLM2's 49,152-token vocabulary: 11 s of 14), the same
    work each run. Without pytest's cache, read each time."""
    import hashlib
    import os
    from importlib.metadata import version

    import gguf

    from conftest import REFERENCES

    saved = None
    if REFERENCES:
        with open(path, "rb") as f:
            digest = hashlib.file_digest(f, "sha256").hexdigest()[:32]
        saved = REFERENCES[0] / f"{digest}-gguf-{version('gguf')}-token_embd.npy"
        if saved.exists():
            return np.load(saved)
    t = next(t for t in gguf.GGUFReader(path).tensors if t.name == "token_embd.weight")
    e = np.asarray(gguf.quants.dequantize(np.asarray(t.data), t.tensor_type))  # [V, D], float32
    if saved is not None:
        partial = saved.with_name(f"{saved.name}.partial-{os.getpid()}.npy")
        np.save(partial, e)
        partial.rename(saved)  # whole or not at all
    return e


def brute_units(folder: Path, key: str) -> np.ndarray:
    if (folder / "model.gguf").exists():  # a pulled model runs its GGUF in place: gguf-py reads the embedding
        e = gguf_embedding(folder / "model.gguf").astype(np.float64)  # [V, D]
    else:
        e = load_file(str(folder / "model.safetensors"))[key].astype(np.float64)  # [V, D]
    return e / np.linalg.norm(e, axis=1, keepdims=True)


def brute_nearest(units: np.ndarray, v: np.ndarray, exclude, k: int):
    cos = units @ (v / np.linalg.norm(v))  # [V]
    order = [int(i) for i in np.lexsort((np.arange(len(cos)), -cos)) if int(i) not in set(exclude)]
    return order[:k], cos


def run_json(cli, *args):
    r = cli("embed", *args, "--json")
    assert r.exit_code == 0, r.stderr
    return json.loads(r.stdout)


@pytest.mark.parametrize("folder", [TINY_GPT2, TINY_LLAMA], ids=["gpt2", "llama"])
def test_neighbors_equal_brute_force(cli, folder):
    units = brute_units(folder, KEYS[folder])
    data = run_json(cli, "neighbors", "a", "-m", folder, "-k", "7")
    assert set(data) >= {"model", "query", "neighbors"}
    (word,) = data["query"]["words"]
    ids = [t["id"] for t in word["tokens"]]
    assert len(ids) == 1
    want, cos = brute_nearest(units, units[ids[0]], ids, 7)
    assert [n["id"] for n in data["neighbors"]] == want
    assert all(set(n) >= {"token", "id", "cosine"} for n in data["neighbors"])
    assert np.abs(np.array([n["cosine"] for n in data["neighbors"]]) - cos[want]).max() <= 1e-5


@pytest.mark.parametrize("folder", [TINY_GPT2, TINY_LLAMA], ids=["gpt2", "llama"])
def test_analogy_and_similarity_equal_brute_force(cli, folder):
    units = brute_units(folder, KEYS[folder])
    data = run_json(cli, "analogy", "a", "b", "c", "--expect", "d", "-m", folder, "-k", "5")
    ids = [w["tokens"][0]["id"] for w in data["query"]["words"]]
    v = units[ids[0]] - units[ids[1]] + units[ids[2]]
    want, cos = brute_nearest(units, v, ids, len(units))
    assert [n["id"] for n in data["neighbors"]] == want[:5]
    assert np.abs(np.array([n["cosine"] for n in data["neighbors"]]) - cos[want[:5]]).max() <= 1e-5
    d = data["expected"]["tokens"][0]["id"]
    assert data["expected_rank"] == want.index(d) + 1
    sim = run_json(cli, "similarity", "a", "b", "-m", folder)
    assert sim["cosine"] == pytest.approx(float(units[ids[0]] @ units[ids[1]]), abs=1e-6)
    assert sim["angle"] == pytest.approx(np.degrees(np.arccos(units[ids[0]] @ units[ids[1]])), abs=6e-3)  # 4 significant digits, as every figure of --json (cli/json.py)


def test_analogy_known_by_construction():
    """royalty, maleness and femaleness as orthogonal directions: king = royal + male, queen =
    royal + female, so king - man + woman points exactly at queen; and without word2vec's
    exclusion the nearest would be king itself (a distractor shows the rule matters)."""
    from tfcli.analysis.embedding import analogy, nearest, rank, unit_rows

    royal, male, female, other = np.eye(4)
    rows = np.stack([royal + male, male, female, royal + female, other, royal + 0.9 * male + 0.1 * other])  # [6, 4]
    king, man, woman, queen, _, near_king = range(6)
    units = unit_rows(rows)
    v = analogy(rows[king], rows[man], rows[woman])
    found = nearest(units, v, 3, exclude=(king, man, woman))
    assert found.ids[0] == queen
    assert rank(units, v, queen, exclude=(king, man, woman)) == 1
    assert rank(units, v, king, exclude=(king, man, woman)) is None
    # v = (royal + male)/√2 - male + female: cosine with queen = (1/√2 + 1)/(√2 * |v|)
    norm_v = np.linalg.norm(v)
    assert found.cosines[0] == pytest.approx((1 / np.sqrt(2) + 1) / (np.sqrt(2) * norm_v), abs=1e-6)
    assert nearest(units, rows[king], 2, exclude=(king,)).ids[0] == near_king


def test_direction_projection_by_hand():
    from tfcli.analysis.embedding import direction_projections

    he, she = np.array([1.0, 0.0, 0.0]), np.array([0.0, 1.0, 0.0])
    p = direction_projections(he, she, np.stack([he, she, np.array([0.0, 0.0, 5.0]), np.array([2.0, 0.0, 0.0])]))
    assert p.tolist() == pytest.approx([1 / np.sqrt(2), -1 / np.sqrt(2), 0.0, 1 / np.sqrt(2)])


def test_split_word_is_said_and_is_the_mean(cli):
    r = cli("embed", "neighbors", "king", "-m", TINY_GPT2)
    assert r.exit_code == 0, r.stderr
    assert "split into 4 tokens" in r.stderr and "mean" in r.stderr and "'k'" in r.stderr
    data = run_json(cli, "neighbors", "king", "-m", TINY_GPT2, "-k", "3")
    word = data["query"]["words"][0]
    assert word["split"] and [t["text"] for t in word["tokens"]] == ["k", "i", "n", "g"]
    units = brute_units(TINY_GPT2, KEYS[TINY_GPT2])
    raw = load_file(str(TINY_GPT2 / "model.safetensors"))[KEYS[TINY_GPT2]].astype(np.float64)
    ids = [t["id"] for t in word["tokens"]]
    want, _ = brute_nearest(units, raw[ids].mean(axis=0), ids, 3)
    assert [n["id"] for n in data["neighbors"]] == want


def test_layer_uses_the_residual_stream(cli):
    from tfcli.analysis.lens import residual_stream
    from tfcli.store import load

    lm = load(TINY_LLAMA)
    data = run_json(cli, "similarity", "a", "b", "-m", TINY_LLAMA, "--layer", "2")
    ids = [w["tokens"][0]["id"] for w in data["query"]["words"]]
    start = []  # tiny-llama's tokenizer adds no BOS and has no <|endoftext|>: its config's BOS
    if lm.config.bos_token_id is not None:
        start = [lm.config.bos_token_id]
    va, vb = (residual_stream(lm.model, start + [i], None, FAST)[2][-1] for i in ids)
    assert data["cosine"] == pytest.approx(float(va @ vb / np.linalg.norm(va) / np.linalg.norm(vb)), abs=1e-5)
    assert data["query"]["layer"] == 2 and data["baseline"] is None
    layer0 = run_json(cli, "similarity", "a", "b", "-m", TINY_LLAMA, "--layer", "0")  # Llama's layer 0 is the embedding
    plain = run_json(cli, "similarity", "a", "b", "-m", TINY_LLAMA)
    assert layer0["cosine"] == pytest.approx(plain["cosine"], abs=1e-6)


def test_text_output(cli):
    r = cli("embed", "direction", "a", "b", "c", "d", "-m", TINY_GPT2)
    assert r.exit_code == 0, r.stderr
    assert "projection" in r.stdout and "+" in r.stdout and "\x1b[" not in r.stdout
    r = cli("embed", "neighbors", "a", "-m", TINY_GPT2, "--lang", "zh")
    assert "余弦" in r.stdout


@pytest.mark.parametrize(
    "args, code, message",
    [
        (["neighbors", "a", "b"], 2, "takes 1 word"),
        (["analogy", "a", "b"], 2, "takes 3 word"),
        (["direction", "a", "b"], 2, "at least 3"),
        (["neighbors", ""], 2, "empty"),
        (["neighbors", "天气", "-m", "shakespeare"], 2, "not in"),  # a character-level English vocabulary
        (["neighbors", "a", "--resid", "9"], 2, "--resid 9"),
        (["neighbors", "a", "-k", "0"], 2, "--top"),
        (["neighbors", "a", "--expect", "b"], 2, "--expect"),
        (["nope", "a"], 2, "nope"),
    ],
)
def test_bad_input(cli, args, code, message):
    model = [] if "-m" in args else ["-m", TINY_GPT2]
    r = cli("embed", *args, *model)
    assert r.exit_code == code, (r.stdout, r.stderr)
    assert message in r.stderr and r.stderr.strip().count("\n") == 0 and "Traceback" not in r.stderr


@pytest.mark.slow
def test_smollm2_king_man_woman_is_queen(cli, smollm2_folder):
    folder = smollm2_folder
    units = brute_units(folder, "model.embed_tokens.weight")
    data = run_json(cli, "analogy", "king", "man", "woman", "--expect", "queen", "-m", folder)
    ids = [w["tokens"][0]["id"] for w in data["query"]["words"]]
    want, _ = brute_nearest(units, units[ids[0]] - units[ids[1]] + units[ids[2]], ids, 10)
    assert [n["id"] for n in data["neighbors"]] == want
    assert data["expected_rank"] == want.index(data["expected"]["tokens"][0]["id"]) + 1
