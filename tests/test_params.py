"""tfcli params: the GPT-3 tally, exact counts, FLOPs and memory, and counts checked against weight files.

The exact totals pinned here were also counted independently, with transformers on the meta device
(GPT2LMHeadModel / LlamaForCausalLM built from each preset's shape; `sum(p.numel() for p in
model.parameters())`, which counts a tied matrix once): every preset agreed to the parameter.
That check is not repeated here because importing torch alone takes longer than the rest of this file;
only the Qwen2 tests import it (once, for a module-scoped pair of checkpoints written by transformers).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from safetensors.numpy import load_file, save_file

from conftest import TINY_GPT2, TINY_LLAMA
from tfcli import numbers
from tfcli.analysis.params import costs, presets, tally
from tfcli.analysis.params.shape import ShapeError, modify
from tfcli.engine.config import ModelConfig


@pytest.fixture(autouse=True)
def english(monkeypatch):
    """The locale picks the language: pin it, so that a developer's zh_CN shell does not change the output."""
    for var in ("LC_ALL", "LC_MESSAGES", "LANG"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("LANG", "C.UTF-8")


def shape(name: str) -> ModelConfig:
    return presets.get(name).config


def one_error_line(r, code: int = 2) -> str:
    assert r.exit_code == code, (r.exit_code, r.stdout, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), r.stderr
    return lines[0]


# --- the 3Blue1Brown tally ---------------------------------------------------------------------------

GPT3_TALLY = {
    "embedding": 617_558_016,
    "key": 14_495_514_624,
    "query": 14_495_514_624,
    "value": 14_495_514_624,
    "output": 14_495_514_624,
    "up": 57_982_058_496,
    "down": 57_982_058_496,
    "unembedding": 617_558_016,
}
GPT3_STEPS = {
    "head_query": 1_572_864,
    "head_key": 1_572_864,
    "head_value_down": 1_572_864,
    "head_value_up": 1_572_864,
    "head": 6_291_456,
    "layer_attention": 603_979_776,
    "layer_mlp": 1_207_959_552,
    "all_attention": 57_982_058_496,
    "all_mlp": 115_964_116_992,
}


def test_gpt3_tally_line_by_line():
    t = tally.tally_3b1b(shape("gpt3"))
    assert [r.key for r in t.rows] == list(GPT3_TALLY)  # 3Blue1Brown's order
    assert {r.key: r.count for r in t.rows} == GPT3_TALLY
    assert t.total == 175_181_291_520
    assert {r.key: r.count for r in t.steps} == GPT3_STEPS


def test_tally_with_grouped_query_attention_counts_kv_heads_for_key_and_value():
    s = shape("smollm2-135m")  # 30 layers, d 576, 9 query heads and 3 kv heads of 64, d_ff 1536
    t = tally.tally_3b1b(s)
    assert t["query"] == t["output"] == 30 * 9 * 64 * 576
    assert t["key"] == t["value"] == 30 * 3 * 64 * 576
    assert t["up"] == 30 * 2 * 576 * 1536  # SwiGLU: gate and up
    assert t["layer_attention"] == (9 + 3) * 2 * 576 * 64
    assert "Hkv" in next(r.formula for r in t.rows if r.key == "key")


# --- the exact count ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name, total",
    [
        ("gpt3", 174_604_259_328),
        ("gpt2", 124_439_808),
        ("gpt2-medium", 354_823_168),
        ("gpt2-large", 774_030_080),
        ("gpt2-xl", 1_557_611_200),
        ("smollm2-135m", 134_515_008),
    ],
)
def test_exact_totals(name, total):
    assert tally.exact(shape(name)).total == total


GPT3_ROWS = {  # exact count; the paper's Table 2.1 figure
    "gpt3-small": (125_226_240, "125M"),
    "gpt3-medium": (355_871_744, "350M"),
    "gpt3-large": (760_300_032, "760M"),
    "gpt3-xl": (1_315_723_264, "1.3B"),
    "gpt3-2.7b": (2_651_553_280, "2.7B"),
    "gpt3-6.7b": (6_658_404_352, "6.7B"),
    "gpt3-13b": (12_853_386_240, "13B"),
    "gpt3": (174_604_259_328, "175B"),
}


@pytest.mark.parametrize("name", GPT3_ROWS)
def test_every_gpt3_row_against_the_paper(name):
    total, figure = GPT3_ROWS[name]
    p = presets.get(name)
    assert p.quoted == figure
    assert tally.exact(p.config).total == total
    assert abs(total - numbers.parse_figure(figure)) / numbers.parse_figure(figure) < 0.02
    # Every figure is the exact count rounded to the digits printed, except Medium: 355.9M printed as 350M.
    assert numbers.rounds_to(total, figure) == (name != "gpt3-medium")


def test_gpt3_exact_rows_and_why_the_totals_differ():
    s = shape("gpt3")
    e = tally.exact(s)
    assert e["token_embedding"] == 617_558_016
    assert e["position_embedding"] == 2048 * 12288
    assert e["attn_q"] == e["attn_k"] == e["attn_v"] == e["attn_o"] == 14_495_514_624
    assert e["mlp"] == 115_964_116_992
    assert e["unembedding"] == 0  # tied
    diff = {r.key: r.count for r in tally.difference(s)}
    assert diff == {"diff_unembedding": 617_558_016, "diff_positions": -25_165_824, "diff_biases": -10_616_832, "diff_norms": -4_743_168}
    assert sum(diff.values()) == 175_181_291_520 - 174_604_259_328


@pytest.mark.parametrize("name", list(presets.PRESETS))
def test_difference_explains_the_whole_gap_for_every_preset(name):
    s = shape(name)
    assert sum(r.count for r in tally.difference(s)) == tally.tally_3b1b(s).total - tally.exact(s).total


def test_gpt2_three_ways():
    """117M (the GPT-2 paper), 124M (exact, tied), 163M (exact with the unembedding stored apart)."""
    s = shape("gpt2")
    assert presets.get("gpt2").quoted == "117M"
    assert tally.exact(s).total == 124_439_808
    assert tally.exact(modify(s, tied=False)).total == 163_037_184


# --- compute and memory ------------------------------------------------------------------------------


def test_gpt3_flops_and_memory():
    s = shape("gpt3")
    c = costs.compute(s)
    assert c.matmul_params == 174_563_733_504  # every layer matrix + the unembedding
    assert c.attention == 2 * 96 * 2048 * 12288 == 4_831_838_208
    assert c.forward == 2 * c.matmul_params + c.attention
    assert c.training == 3 * c.forward
    assert costs.weight_bytes(174_604_259_328) == {"fp32": 698_417_037_312, "fp16": 349_208_518_656, "int8": 174_604_259_328, "int4": 87_302_129_664}
    kv = costs.kv_cache(s)
    assert kv.per_token["fp16"] == 2 * 96 * 96 * 128 * 2 == 4_718_592
    assert kv.full_context["fp16"] == 4_718_592 * 2048
    assert kv.per_token["fp32"] == 2 * kv.per_token["fp16"]
    a = costs.attention_pattern(s)
    assert a.per_head == 2048 * 2048 and a.per_layer == 96 * 2048 * 2048 and a.all_layers == 96 * 96 * 2048 * 2048
    # GQA shrinks the cache by H / Hkv
    assert costs.kv_cache(shape("smollm2-135m")).per_token["fp32"] == 2 * 30 * 3 * 64 * 4


# --- shapes from flags -------------------------------------------------------------------------------


def test_modify_rederives_what_followed():
    s = modify(shape("gpt3"), layers=2, d_model=128, heads=4, vocab=1000, context=64)
    assert (s.head_dim, s.n_kv_head, s.d_ff) == (32, 4, 512)
    # 1000·128 + 64·128 + 2·(12·128² + 13·128) + 2·128
    assert tally.exact(s).total == 532_992
    swiglu = modify(shape("gpt3"), mlp="swiglu")
    assert swiglu.d_ff == 32768  # LLaMA's rule: 2/3 of 4·D, up to a multiple of 256
    # SmolLM2's 9 heads of 64 fill d_model 576, so the head size follows; its 3 GQA heads are kept.
    s = modify(shape("smollm2-135m"), heads=12)
    assert (s.n_kv_head, s.head_dim) == (3, 48)
    # A head size set apart from d_model / heads (as some Llamas do) is kept.
    apart = modify(shape("smollm2-135m"), head_dim=32)
    assert modify(apart, heads=12).head_dim == 32


@pytest.mark.parametrize(
    "changes, needle",
    [
        ({"heads": 7}, "d_model 12,288 is not divisible by 7 heads"),
        ({"layers": 0}, "layers must be a positive whole number, not 0"),
        ({"d_model": -5}, "d_model must be a positive whole number, not -5"),
        ({"kv_heads": 5}, "96 query heads cannot be shared evenly by 5 key/value heads"),
    ],
)
def test_impossible_shapes(changes, needle):
    with pytest.raises(ShapeError, match=needle):
        modify(shape("gpt3"), **changes)


def test_analysis_imports_nothing_heavy():
    """The accounting reads the engine's ModelConfig, and of the engine only that (and its errors)."""
    code = "import sys, tfcli.analysis.params.shape, tfcli.analysis.params.tally, tfcli.analysis.params.costs, tfcli.analysis.params.presets; print(sorted(m for m in sys.modules if m.split('.')[0] in ('numpy', 'tokenizers', 'safetensors', 'torch') or m.startswith('tfcli.engine')))"
    r = subprocess.run([sys.executable, "-c", code], cwd=Path(__file__).parent.parent, capture_output=True, text=True, check=True)
    assert r.stdout.strip() == str(["tfcli.engine", "tfcli.engine.config", "tfcli.engine.errors"])


# --- the command ---------------------------------------------------------------------------------------


def test_cli_gpt3_story(cli):
    r = cli("params", "--preset", "gpt3")
    assert r.exit_code == 0, r.stderr
    assert r.stderr == ""
    for n in [*GPT3_TALLY.values(), *GPT3_STEPS.values(), 175_181_291_520, 174_604_259_328]:
        assert f"{n:,}" in r.stdout, n
    for needle in ("Embedding", "Key", "Query", "Value", "Output", "Up-projection", "Down-projection", "Unembedding"):
        assert needle in r.stdout
    assert "tied: shares the embedding" in r.stdout
    assert "175B" in r.stdout and "rounds to it" in r.stdout
    assert "2·N + attention" in r.stdout and "6·N" in r.stdout and "T² = 2,048²" in r.stdout
    assert "中文" not in r.stdout and "嵌入" not in r.stdout


def test_cli_default_is_gpt3(cli):
    assert "175,181,291,520" in cli("params").stdout


def test_cli_json_has_the_same_numbers(cli):
    r = cli("params", "--preset", "gpt3", "--json")
    assert r.exit_code == 0 and r.stderr == ""
    doc = json.loads(r.stdout)  # exactly one document, nothing else on stdout
    assert {row["key"]: row["count"] for row in doc["tally_3b1b"]["rows"]} == GPT3_TALLY
    assert {row["key"]: row["count"] for row in doc["tally_3b1b"]["steps"]} == GPT3_STEPS
    assert doc["tally_3b1b"]["total"] == 175_181_291_520
    assert doc["exact"]["total"] == 174_604_259_328
    assert doc["difference"]["total"] == 175_181_291_520 - 174_604_259_328
    assert doc["quoted"]["figure"] == "175B" and doc["quoted"]["rounds_to"] is True
    assert doc["compute"]["attention"] == 4_831_838_208
    assert doc["memory"]["kv_cache"]["per_token"]["fp16"] == 4_718_592
    assert doc["memory"]["weights"]["fp16"] == 349_208_518_656
    assert doc["shape"]["layers"] == 96 and doc["shape"]["tied"] is True


@pytest.mark.parametrize("name, total", [("gpt2", 124_439_808), ("gpt2-medium", 354_823_168), ("gpt2-large", 774_030_080), ("gpt2-xl", 1_557_611_200)])
def test_cli_gpt2_sizes(cli, name, total):
    doc = json.loads(cli("params", "--preset", name, "--json").stdout)
    assert doc["exact"]["total"] == total


def test_cli_flags_change_a_preset(cli):
    doc = json.loads(cli("params", "--preset", "gpt2", "--untied", "--json").stdout)
    assert doc["exact"]["total"] == 163_037_184
    assert doc["quoted"] is None  # no longer the published shape
    assert doc["changed"] == ["tied"]
    r = cli("params", "--layers", "2", "--d-model", "128", "--heads", "4", "--vocab", "1000", "--context", "64", "--json")
    assert json.loads(r.stdout)["exact"]["total"] == 532_992
    r = cli("params", "--preset", "smollm2-135m", "--no-bias", "--bias", "--json")  # the last flag wins
    assert json.loads(r.stdout)["shape"]["attn_bias"] is True


def test_cli_list_presets(cli):
    r = cli("params", "--list-presets")
    assert r.exit_code == 0
    for name in presets.PRESETS:
        assert name in r.stdout
    doc = json.loads(cli("params", "--list-presets", "--json").stdout)
    assert {p["name"]: p["exact"] for p in doc["presets"]}["gpt2-xl"] == 1_557_611_200


@pytest.mark.parametrize(
    "args, needle",
    [
        (["--preset", "gpt3-smal"], "unknown preset 'gpt3-smal' (did you mean 'gpt3-small'?"),
        (["--preset", "gtp2-xl"], "did you mean 'gpt2-xl'?"),
        (["--heads", "7"], "d_model 12,288 is not divisible by 7 heads"),
        (["--d-model", "100", "--heads", "7"], "d_model 100 is not divisible by 7 heads"),
        (["--layers", "0"], "layers must be a positive whole number, not 0"),
        (["--vocab", "-3"], "vocab must be a positive whole number, not -3"),
        (["--preset", "smollm2-135m", "--heads", "8"], "8 query heads cannot be shared evenly by 3 key/value heads"),
        (["--mlp", "relu"], "--mlp"),
        (["--lang", "fr"], "--lang"),
    ],
)
def test_cli_impossible_shapes_one_line_exit_2(cli, args, needle):
    assert needle in one_error_line(cli("params", *args))


def test_cli_chinese_by_flag_and_by_locale(cli, monkeypatch):
    r = cli("params", "--preset", "gpt3", "--lang", "zh")
    assert r.exit_code == 0
    assert "嵌入" in r.stdout and "反嵌入" in r.stdout and "Embedding" not in r.stdout  # Chinese only, as every command
    assert "两个总数为何不同" in r.stdout
    monkeypatch.setenv("LANG", "zh_CN.UTF-8")
    assert "反嵌入" in cli("params", "--preset", "gpt2").stdout
    assert "反嵌入" not in cli("params", "--preset", "gpt2", "--lang", "en").stdout


def test_cli_model_config(cli):
    doc = json.loads(cli("params", "-m", TINY_LLAMA, "--json").stdout)
    assert doc["shape"] | {"d_attn": 0, "d_kv": 0} == {
        "blocks": 3, "layers": 3, "d_model": 96, "heads": 6, "head_dim": 16, "kv_heads": 2, "d_ff": 160, "vocab": 300, "context": 128,
        "tied": False, "attn_bias": False, "mlp_bias": False, "mlp": "swiglu", "norm": "rmsnorm", "positions": "rope",
        "qkv_bias": False, "o_bias": False, "norms_per_block": 2, "qk_norm": False, "d_attn": 0, "d_kv": 0,
    }  # fmt: skip
    r = cli("params", "-m", TINY_GPT2, "--preset", "gpt3", "--json")  # config.json wins over the preset
    assert json.loads(r.stdout)["shape"]["layers"] == 3
    assert "replaces --preset gpt3" in r.stderr


# --- analytic vs actual, on checkpoints written by transformers ----------------------------------------


def compare(cli, path, *args):
    r = cli("params", "--from", path, "--json", *args)
    return r, json.loads(r.stdout)["from"]


@pytest.mark.parametrize("path", [TINY_GPT2, TINY_LLAMA, TINY_GPT2 / "model.safetensors", TINY_LLAMA / "model.safetensors"])
def test_from_agrees_on_both_families(cli, path):
    r, f = compare(cli, path)
    assert r.exit_code == 0, r.stderr
    assert f["agree"] and not f["mismatched"] and not f["uncategorised"]
    for row in f["rows"]:
        assert row["analytic"] == row["actual"], row
    weights = load_file(path if path.suffix == ".safetensors" else path / "model.safetensors")
    assert f["analytic_total"] == f["actual_total"] == sum(t.size for t in weights.values())
    # Q, K and V: GPT-2's fused c_attn split in thirds; Llama's separate q/k/v_proj (GQA: K, V smaller)
    rows = {row["key"]: row["actual"] for row in f["rows"]}
    if "gpt2" in str(path):
        assert rows["attn_q"] == rows["attn_k"] == rows["attn_v"] == 3 * 64 * 64
        assert rows["unembedding"] == 0  # tied: transformers does not store lm_head
    else:
        assert rows["attn_q"] == 3 * 96 * 96 and rows["attn_k"] == rows["attn_v"] == 3 * 96 * 32
        assert rows["unembedding"] == 300 * 96


def test_from_table(cli):
    r = cli("params", "--from", TINY_LLAMA)
    assert r.exit_code == 0
    assert "30 tensors in 1 file" in r.stdout and "agree" in r.stdout and "✗" not in r.stdout


def _copy(src, dst, tensors, config_changes=None):
    dst.mkdir()
    save_file(tensors, str(dst / "model.safetensors"), metadata={"format": "pt"})
    config = json.loads((src / "config.json").read_text())
    (dst / "config.json").write_text(json.dumps(config | (config_changes or {})))
    return dst


def test_from_old_gpt2_layout_without_prefix_and_with_mask_buffers(cli, tmp_path):
    """The layout of openai-community/gpt2: no 'transformer.' prefix, causal masks saved as attn.bias."""
    import numpy as np

    tensors = {k.removeprefix("transformer."): v for k, v in load_file(TINY_GPT2 / "model.safetensors").items()}
    for i in range(3):
        tensors[f"h.{i}.attn.bias"] = np.tril(np.ones((1, 1, 128, 128), dtype=np.float32))
    r, f = compare(cli, _copy(TINY_GPT2, tmp_path / "old-gpt2", tensors))
    assert r.exit_code == 0 and f["agree"]
    assert sorted(f["buffers"]) == ["h.0.attn.bias", "h.1.attn.bias", "h.2.attn.bias"]
    assert "3 stored buffer(s) not counted" in cli("params", "--from", tmp_path / "old-gpt2").stdout


def test_from_tied_llama_with_biases(cli, tmp_path):
    """Names as transformers writes them with attention_bias and mlp_bias (q_proj.bias ... down_proj.bias)."""
    import numpy as np

    tensors = load_file(TINY_LLAMA / "model.safetensors")
    del tensors["lm_head.weight"]
    for i in range(3):
        for name, n in (("self_attn.q_proj", 96), ("self_attn.k_proj", 32), ("self_attn.v_proj", 32), ("self_attn.o_proj", 96), ("mlp.gate_proj", 160), ("mlp.up_proj", 160), ("mlp.down_proj", 96)):
            tensors[f"model.layers.{i}.{name}.bias"] = np.zeros(n, dtype=np.float32)
    folder = _copy(TINY_LLAMA, tmp_path / "llama-bias", tensors, {"attention_bias": True, "mlp_bias": True, "tie_word_embeddings": True})
    r, f = compare(cli, folder)
    assert r.exit_code == 0 and f["agree"], f
    rows = {row["key"]: row["actual"] for row in f["rows"]}
    assert rows["attn_bias"] == 3 * (96 + 32 + 32 + 96) and rows["mlp_bias"] == 3 * (160 + 160 + 96) and rows["unembedding"] == 0


def test_from_sharded_folder(cli, tmp_path):
    tensors = load_file(TINY_LLAMA / "model.safetensors")
    folder = tmp_path / "sharded"
    folder.mkdir()
    names = sorted(tensors)
    shards = {"model-00001-of-00002.safetensors": names[: len(names) // 2], "model-00002-of-00002.safetensors": names[len(names) // 2 :]}
    for shard, keys in shards.items():
        save_file({k: tensors[k] for k in keys}, str(folder / shard))
    index = {"metadata": {}, "weight_map": {k: shard for shard, keys in shards.items() for k in keys}}
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))
    shutil.copy(TINY_LLAMA / "config.json", folder)
    r, f = compare(cli, folder)
    assert r.exit_code == 0 and f["agree"] and len(f["files"]) == 2


def test_from_missing_tensor_is_reported(cli, tmp_path):
    tensors = load_file(TINY_GPT2 / "model.safetensors")
    del tensors["transformer.h.1.mlp.c_fc.weight"]
    folder = _copy(TINY_GPT2, tmp_path / "missing", tensors)
    r, f = compare(cli, folder)
    assert r.exit_code == 1
    assert not f["agree"] and f["mismatched"] == ["mlp"]
    row = next(row for row in f["rows"] if row["key"] == "mlp")
    assert row["analytic"] - row["actual"] == 64 * 256
    assert "differ" in r.stderr
    table = cli("params", "--from", folder)
    assert table.exit_code == 1 and "✗ −16,384" in table.stdout


def test_from_extra_tensor_is_reported(cli, tmp_path):
    import numpy as np

    tensors = load_file(TINY_LLAMA / "model.safetensors") | {"model.layers.0.mystery.weight": np.zeros((4, 5), dtype=np.float32)}
    folder = _copy(TINY_LLAMA, tmp_path / "extra", tensors)
    r, f = compare(cli, folder)
    assert r.exit_code == 1 and not f["agree"]
    assert f["uncategorised"] == [{"name": "model.layers.0.mystery.weight", "shape": [4, 5]}]
    assert f["actual_total"] == f["analytic_total"] + 20
    assert "model.layers.0.mystery.weight" in cli("params", "--from", folder).stdout


def test_from_against_the_wrong_shape(cli):
    r, f = compare(cli, TINY_GPT2, "--layers", "4")
    assert r.exit_code == 1 and set(f["mismatched"]) == {"attn_q", "attn_k", "attn_v", "attn_o", "attn_bias", "mlp", "mlp_bias", "norms"}


def test_from_without_a_shape(cli, tmp_path):
    lone = tmp_path / "lone.safetensors"
    shutil.copy(TINY_GPT2 / "model.safetensors", lone)
    assert "no config.json beside" in one_error_line(cli("params", "--from", lone), code=1)
    r, f = compare(cli, lone, "-m", TINY_GPT2)
    assert r.exit_code == 0 and f["agree"]
    assert "no such file or folder" in one_error_line(cli("params", "--from", tmp_path / "nope", "--preset", "gpt2"), code=1)


@pytest.mark.parametrize("preset", ["gpt3", "gpt2", "smollm2-135m", "gpt3-small"])
def test_difference_rows_lead_from_the_exact_count_to_the_tally(cli, preset):
    """The 'why the two totals differ' table must add up, in the order it is printed."""
    import json as _json

    r = cli("params", "--preset", preset, "--json")
    report = _json.loads(r.stdout)
    steps = sum(row["count"] for row in report["difference"]["rows"])
    assert report["exact"]["total"] + steps == report["tally_3b1b"]["total"]
    text = cli("params", "--preset", preset).stdout
    section = text[text.index("Why the two totals differ") :]
    assert section.index("Exact count") < section.index("3Blue1Brown")


# --- Qwen2: biases on Q, K and V but not on O ----------------------------------------------------------


@pytest.fixture(scope="module")
def qwen2_folders(tmp_path_factory):
    """Two random Qwen2ForCausalLM checkpoints as transformers saves them: GQA, tied and untied."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    folders = {}
    for tied in (True, False):
        torch.manual_seed(0)
        config = transformers.Qwen2Config(
            vocab_size=320, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, max_position_embeddings=64, tie_word_embeddings=tied, use_sliding_window=False,
        )  # fmt: skip
        folder = tmp_path_factory.mktemp(f"qwen2-{'tied' if tied else 'untied'}")
        transformers.Qwen2ForCausalLM(config).save_pretrained(folder, safe_serialization=True)
        folders[tied] = folder
    return folders


@pytest.mark.parametrize("tied", [True, False])
def test_from_qwen2_counts_its_biases_exactly(cli, qwen2_folders, tied):
    folder = qwen2_folders[tied]
    r, f = compare(cli, folder)
    assert r.exit_code == 0, r.stderr
    assert f["agree"] and not f["mismatched"] and not f["uncategorised"], f
    weights = load_file(folder / "model.safetensors")
    assert f["analytic_total"] == f["actual_total"] == sum(t.size for t in weights.values())
    rows = {row["key"]: row["actual"] for row in f["rows"]}
    assert rows["attn_bias"] == 2 * (4 * 16 + 2 * 2 * 16)  # q, k and v biases; o has none
    assert not any(name.endswith("o_proj.bias") for name in weights)
    assert rows["mlp_bias"] == 0 and rows["unembedding"] == (0 if tied else 320 * 64)
    doc = json.loads(r.stdout)
    assert doc["shape"]["qkv_bias"] is True and doc["shape"]["o_bias"] is False
    bias_row = next(row for row in doc["exact"]["rows"] if row["key"] == "attn_bias")
    assert (bias_row["formula"], bias_row["numbers"], bias_row["count"]) == ("L × (H·Dh + 2·Hkv·Dh)", "2 × 128", 256)


def test_qwen2_header_names_its_biases(cli, qwen2_folders):
    r = cli("params", "-m", qwen2_folders[True])
    assert r.exit_code == 0, r.stderr
    assert "SwiGLU MLP · RMSNorm · RoPE positions · Q/K/V biases · tied embeddings" in r.stdout


# --- one source for each row: count, formula and numbers ------------------------------------------------


def _axes(s: ModelConfig) -> dict[str, int]:
    return {"L": s.n_layer, "D": s.d_model, "H": s.n_head, "Hkv": s.n_kv_head, "Dh": s.head_dim, "F": s.d_ff, "V": s.vocab_size, "T": s.n_ctx}


def _evaluate(text: str, names: dict[str, int]) -> int:
    """A formula or a numbers line as Python: × and · multiply, thousands separators go."""
    expr = text.replace("×", "*").replace("·", "*").replace(",", "")
    return eval(expr, {"__builtins__": {}}, names)  # noqa: S307 - our own formula text


@pytest.mark.parametrize("name", list(presets.PRESETS))
@pytest.mark.parametrize("changes", [{}, {"kv_heads": 4, "heads": 8, "d_model": 512}, {"mlp": "swiglu", "tied": False}, {"bias": False}])
def test_every_row_is_its_own_formula_filled_in(name, changes):
    """The formula, with the axes' values put in, and the numbers line both give the row's count."""
    s = modify(shape(name), **changes)
    steps = tally.tally_3b1b(s)
    named = {"head": steps["head"] if "head" in {r.key for r in steps.steps} else 0}
    for r in (*steps.rows, *steps.steps, *tally.exact(s).rows, costs.attention_flops(s), costs.kv_per_token(s, "fp16")):
        if not r.factors:
            assert r.count == 0 and r.formula == r.numbers == "" and r.note, r
            continue
        assert _evaluate(r.numbers, {}) == r.count, r
        if "one block" in r.formula:  # "L × one block": the block's count is the step before
            continue
        assert _evaluate(r.formula, _axes(s) | named) == r.count, r


def test_difference_rows_are_sums_of_the_rows_they_name():
    s = shape("gpt3")
    e = tally.exact(s)
    diff = {r.key: r for r in tally.difference(s)}
    assert diff["diff_biases"].count == -(e["attn_bias"] + e["mlp_bias"])
    assert diff["diff_biases"].formula == "L × (3·H·Dh + D) + L × (F + D)"
    assert diff["diff_positions"].numbers == "2,048 × 12,288"


def test_qwen2_shape_counts_qkv_biases_without_o():
    from dataclasses import replace

    s = replace(shape("smollm2-135m"), family="qwen2", qkv_bias=True)  # SmolLM2's shape with Qwen2's biases
    bias = tally.exact(s).row("attn_bias")
    assert bias.count == 30 * (9 * 64 + 2 * 3 * 64) and bias.formula == "L × (H·Dh + 2·Hkv·Dh)"
    assert tally.exact(replace(s, o_bias=True)).row("attn_bias").count == 30 * (9 * 64 + 2 * 3 * 64 + 576)


# --- numbers ----------------------------------------------------------------------------------------------


def test_number_formats():
    assert numbers.count(175_181_291_520) == "175,181,291,520"
    assert (numbers.signed(617_558_016), numbers.signed(-25_165_824), numbers.signed(0)) == ("+617,558,016", "−25,165,824", "+0")
    assert (numbers.si(4_831_838_208, "FLOP"), numbers.si(999, "FLOP"), numbers.si(1_000, "FLOP")) == ("4.83 GFLOP", "999 FLOP", "1 kFLOP")
    assert (numbers.size(349_208_518_656), numbers.size(1_536), numbers.size(512)) == ("349 GB", "1.54 kB", "512 bytes")
    assert (numbers.size(1_500_000_000), numbers.size(12), numbers.size(12.4), numbers.size(1.234e10)) == ("1.5 GB", "12 bytes", "12 bytes", "12.3 GB")
    assert (numbers.share(1, 3), numbers.share(1, 10_000), numbers.share(0, 5)) == ("33.3", "<0.1", "0.0")
    assert numbers.percent(40_525_824, 174_604_259_328) == "0.02%"
    assert (numbers.signed_percent(0.0179), numbers.signed_percent(-0.0113)) == ("+1.8%", "-1.1%")
    assert numbers.parse_figure("1.3B") == 1_300_000_000 and numbers.parse_figure("125M") == 125_000_000
    assert numbers.rounds_to(1_315_723_264, "1.3B") and not numbers.rounds_to(355_871_744, "350M")


def test_numbers_imports_only_the_standard_library():
    """Engine, analysis and CLI all use it: it must load nothing of theirs (nor NumPy, typer, rich)."""
    code = "import sys; import tfcli.numbers; print(sorted(m for m in sys.modules if m.split('.')[0] in ('tfcli', 'numpy', 'typer', 'rich', 'click')))"
    r = subprocess.run([sys.executable, "-c", code], cwd=Path(__file__).parent.parent, capture_output=True, text=True, check=True)
    assert r.stdout.strip() == str(["tfcli", "tfcli.numbers"])


# --- the title of a changed shape ---------------------------------------------------------------------------


def test_flags_that_make_a_preset_are_titled_as_that_preset(cli):
    """GPT-3 with 12 layers of 768 and 12 heads is GPT-3 Small (issue: it was "GPT-3 175B, changed: ...")."""
    r = cli("params", "--layers", "12", "--d-model", "768", "--heads", "12")
    assert r.exit_code == 0, r.stderr
    first = r.stdout.splitlines()[0]
    assert first.startswith("GPT-3 Small  gpt3-small") and "175B" not in first
    assert "125M. The exact 125,226,240 rounds to it" in r.stdout
    doc = json.loads(cli("params", "--preset", "gpt2", "--context", "2048", "--json").stdout)  # GPT-3 Small is GPT-2 small at 2,048
    assert (doc["name"], doc["title"], doc["quoted"]["figure"], doc["changed"]) == ("gpt3-small", "GPT-3 Small", "125M", ["context"])


def test_flags_on_the_default_are_a_custom_shape(cli):
    r = cli("params", "--layers", "2", "--d-model", "128", "--heads", "4")
    assert r.exit_code == 0, r.stderr
    first = r.stdout.splitlines()[0]
    assert first.startswith("Custom shape  custom · shape flags on gpt3") and "changed" not in first
    doc = json.loads(cli("params", "--layers", "2", "--d-model", "128", "--heads", "4", "--json").stdout)
    assert (doc["name"], doc["title"], doc["quoted"]) == ("custom", "Custom shape", None)


def test_flags_on_a_named_preset_say_what_they_changed(cli):
    doc = json.loads(cli("params", "--preset", "gpt3", "--layers", "48", "--context", "8192", "--json").stdout)
    assert doc["title"] == "Custom shape: GPT-3 175B, changed: layers 48, context 8,192"
    assert doc["name"] == "gpt3" and doc["quoted"] is None


# --- --from by name, and a path that is not there ---------------------------------------------------------


def test_from_a_model_name_resolves_through_the_store(cli, tmp_path):
    """--from NAME finds a model as -m does: a shipped one, or one in the cache ($TFCLI_HOME/models)."""
    r, f = compare(cli, "tang")
    assert r.exit_code == 0, r.stderr
    assert f["agree"] and f["actual_total"] == 5_566_720
    cached = tmp_path / "tfcli-home" / "models" / "tiny"
    shutil.copytree(TINY_LLAMA, cached)
    r, f = compare(cli, "tiny")
    assert r.exit_code == 0, r.stderr
    assert f["agree"] and f["path"] == str(cached)
    assert json.loads(r.stdout)["source"] == str(cached / "config.json")


def test_from_an_unknown_name_or_a_missing_path(cli, tmp_path):
    assert "unknown model 'tnag' (did you mean 'tang'?" in one_error_line(cli("params", "--from", "tnag"), code=1)
    for args in (["--from", tmp_path / "nope"], ["--from", tmp_path / "nope.safetensors", "--preset", "gpt2"], ["--from", "nope.safetensors"]):
        line = one_error_line(cli("params", *args), code=1)
        assert "does not exist" in line and "no config.json" not in line, line


def test_readme_excerpt_of_params_gpt3_is_what_it_prints(cli):
    """Every line of the README's `tfcli params --preset gpt3` excerpt is a line of the output."""
    from conftest import doc_text

    readme = doc_text()  # README.md and docs/ (docs/inside.md holds the excerpt)
    block = readme.split("$ tfcli params --preset gpt3\n", 1)[1].split("```", 1)[0]
    printed = {line.rstrip() for line in cli("params", "--preset", "gpt3").stdout.splitlines()}
    shown = [line.rstrip() for line in block.splitlines() if line.strip() and line.strip() != "..."]
    assert len(shown) > 15
    for line in shown:
        assert line in printed, line


@pytest.mark.slow
def test_from_smollm2_by_name(cli, monkeypatch, smollm2_folder):
    """`--from smollm2`, as the issue wrote it: the pulled model by its name."""
    monkeypatch.setenv("TFCLI_HOME", str(smollm2_folder.parent.parent))
    r, f = compare(cli, "smollm2")
    assert r.exit_code == 0, r.stderr
    assert f["agree"] and f["actual_total"] == 134_515_008


def test_from_a_bare_file_name_is_the_file(cli, tmp_path, monkeypatch):
    """A model is never a file, so `--from model.safetensors` in the model's folder means that file."""
    shutil.copy(TINY_GPT2 / "model.safetensors", tmp_path / "model.safetensors")
    shutil.copy(TINY_GPT2 / "config.json", tmp_path / "config.json")
    monkeypatch.chdir(tmp_path)
    r, f = compare(cli, "model.safetensors")
    assert r.exit_code == 0, r.stderr
    assert f["agree"] and f["path"] == "model.safetensors"


def test_cli_kv_rows_follow_the_caches_tfcli_keeps(cli):
    # GPT-3's heads of 128 take q8_0's blocks of 32: the table shows that cache beside fp32 and fp16
    # with the JSON's figure; a head of 40 cannot, and the row is not shown
    r = cli("params", "--preset", "gpt3")
    assert "KV cache per token, q8_0" in r.stdout and "2 × 96 × 96 × 4 × 34" in r.stdout
    assert "2.51 MB" in r.stdout and "5.13 GB" in r.stdout  # 2,506,752 bytes a token; x 2,048
    r = cli("params", "--preset", "gpt2", "--head-dim", "40")
    assert r.exit_code == 0, r.stderr
    assert "KV cache per token, fp16" in r.stdout and "q8_0" not in r.stdout
