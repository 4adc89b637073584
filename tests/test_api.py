"""The public Python API (`tfcli/__init__.py`'s __all__): its names and signatures are the documented
ones (a change is a decision, not an accident), each has a docstring with an example, `import tfcli`
imports nothing heavy, and `load` and the model's text methods take good input and refuse bad."""

from __future__ import annotations

import inspect
import subprocess
import sys

import numpy as np
import pytest

import tfcli
from tfcli.engine.errors import TfcliError

PUBLIC = {
    "load": "(name_or_path: 'str | Path', *, fast: 'bool' = True) -> 'Model'",
    "lens": "(model: 'Model', text, *, top: 'int' = 5) -> 'Lens'",
    "patch": "(model: 'Model', clean, corrupt, *, site: 'str' = 'resid', answer=None, wrong=None) -> 'Patching'",
    "ablate": "(model: 'Model', text, *, answer=None) -> 'Ablation'",
    "steer": "(model: 'Model', prompt: 'str', *, toward: 'str', away: 'str', block: 'int', scale: 'float' = 4.0, max_new_tokens: 'int' = 40, "
             "temperature: 'float | None' = None, seed: 'int | None' = None) -> 'Steering'",
    "heads": "(model: 'Model', text, *, position: 'int' = -1, token=None, repeat: 'int' = 20, seed: 'int' = 0) -> 'Heads'",
    "attention": "(model: 'Model', text, *, block=None, head=None) -> 'Attention'",
    "mask": "(text: 'str', *, pattern: 'str' = 'causal') -> 'Mask'",
    "features": "(model: 'Model', folder: 'str | Path', *, any_model: 'bool' = False) -> 'Features'",
    "params": "(preset: 'str | None' = None, *, model: 'str | Path | None' = None) -> 'Params'",
    "explore_page": "(model, text, *, lang: 'str' = 'en') -> 'ExplorePage'",
    "train_features": "(model, text_file: 'str | Path | None', folder: 'str | Path', *, block: 'int | None' = None, site: 'str' = 'resid_post', "
                      "activations: 'str | Path | None' = None, features: 'int | None' = None, kind: 'str' = 'relu', k: 'int' = 32, "
                      "l1: 'float' = 5.0, lr: 'float' = 0.001, betas: 'tuple[float, float]' = (0.9, 0.999), eps: 'float' = 1e-08, "
                      "weight_decay: 'float' = 0.0, warmup: 'int' = 20, lr_schedule: 'str' = 'constant', clip: 'float' = 1.0, "
                      "batch_size: 'int' = 1024, steps: 'int' = 1000, buffer: 'int' = 65536, seed: 'int' = 0, val_fraction: 'float' = 0.1, "
                      "force: 'bool' = False) -> 'Training'",
    "Model.__call__": "(self, text_or_ids) -> 'np.ndarray'",
    "Model.to_tokens": "(self, text: 'str') -> 'np.ndarray'",
    "Model.to_str_tokens": "(self, text_or_ids) -> 'list[str]'",
    "Model.generate": "(self, prompt: 'str', *, max_new_tokens: 'int' = 40, temperature: 'float | None' = None, top_k: 'int | None' = None, "
                      "top_p: 'float | None' = None, min_p: 'float | None' = None, repetition_penalty: 'float | None' = None, "
                      "seed: 'int | None' = None, stop: 'Iterable[str]' = (), stream: 'bool' = False) -> 'str | Iterator[str]'",
    "Model.score": "(self, text: 'str', *, window: 'int | None' = None, stride: 'int | None' = None)",
    "Model.chat": "(self, messages: 'list[dict[str, str]] | str', **sampling) -> 'str'",
    "Model.run_with_cache": "(self, text_or_ids, names: 'Iterable | Callable | None' = None) -> 'tuple[np.ndarray, ActivationCache]'",
    "Model.run_with_hooks": "(self, text_or_ids, fwd_hooks: 'Iterable[tuple[object, Callable]]' = ()) -> 'np.ndarray'",
    "Model.hooks": "(self, hooks: 'Mapping[object, Callable]') -> 'Iterator[Model]'",
    "Model.config": "property", "Model.tokenizer": "property", "Model.n_blocks": "property", "Model.sites": "property",
    "Model.name": "property", "Model.warnings": "property",
    "Model.W_E": "property", "Model.W_U": "property", "Model.W_pos": "property", "Model.W_Q": "property", "Model.W_K": "property",
    "Model.W_V": "property", "Model.W_O": "property", "Model.W_in": "property", "Model.W_gate": "property", "Model.W_out": "property",
    "ActivationCache.accumulated_resid": "(self, layer: 'int | None' = None) -> 'np.ndarray'",
    "ActivationCache.apply_ln_to_stack": "(self, stack: 'np.ndarray') -> 'np.ndarray'",
    "ActivationCache.names": "(self) -> 'list[str]'",
    "ActivationCache.nbytes": "property",
}  # fmt: skip
CLASSES = {"Model", "ActivationCache", "TfcliError", "Features", "Lens", "Patching", "Ablation", "Heads", "Steering",
           "Attention", "Mask", "FeatureShow", "FeatureCards", "Params", "Training", "ExplorePage"}  # fmt: skip


def _signature(obj) -> str:
    return "property" if isinstance(obj, property) else str(inspect.signature(obj))


def _members(cls) -> dict:
    """A public class's own members and those of its tfcli bases (Model's weights mixin)."""
    out: dict = {}
    for base in reversed(cls.__mro__):
        if base.__module__.startswith("tfcli"):
            out.update(vars(base))
    return out


def test_the_public_names_are_the_documented_ones():
    functions = {k for k in PUBLIC if "." not in k}
    assert sorted(tfcli.__all__) == sorted(functions | CLASSES)
    for name in functions:
        assert _signature(getattr(tfcli, name)) == PUBLIC[name], name
    for cls in ("Model", "ActivationCache"):
        members = {f"{cls}.{n}" for n in _members(getattr(tfcli, cls)) if not n.startswith("_") or n == "__call__"}
        assert members == {k for k in PUBLIC if k.startswith(cls + ".")}
        for key in members:
            assert _signature(_members(getattr(tfcli, cls))[key.split(".")[1]]) == PUBLIC[key], key


def test_every_public_name_has_a_docstring_with_an_example():
    missing = []
    for name in tfcli.__all__:
        if name == "TfcliError":
            continue  # the engine's error class, documented there
        doc = inspect.getdoc(getattr(tfcli, name)) or ""
        if ">>>" not in doc:
            missing.append(name)
    for key in PUBLIC:
        if "." in key:
            cls, attr = key.split(".")
            doc = inspect.getdoc(_members(getattr(tfcli, cls))[attr]) or ""
            if not doc:
                missing.append(key)
    assert not missing


def test_import_tfcli_imports_nothing_heavy():
    """`import tfcli` (and so `tfcli --help`) does not import NumPy or the engine: the API's names are
    imported on first use."""
    code = "import sys, tfcli; tfcli.__all__; print(sorted(m for m in sys.modules if m.split('.')[0] in ('numpy', 'typer', 'rich', 'tokenizers') or m.startswith('tfcli.')))"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert r.stdout.strip() == "[]", r.stdout
    assert "load" in dir(tfcli)
    with pytest.raises(AttributeError):
        tfcli.nonsense


def test_a_notebook_session_imports_no_terminal_library():
    """Loading a model, a run, every result's _repr_html_ (the pictures drawn by tfcli/draw/) and its
    .save() as JSON, SVG or HTML leave typer and rich (the command line's libraries) out of the process."""
    code = """
import json, os, sys, tempfile, tfcli
m = tfcli.load("shakespeare")
logits, cache = m.run_with_cache("To be")
results = [tfcli.lens(m, "To be, or not to b"), tfcli.attention(m, "To be", block=0), tfcli.mask("the cat sat"),
           tfcli.patch(m, "To be, or not to b", "To go, or not to g", site="mlp"), tfcli.ablate(m, "To be, or not to b", answer="e"),
           tfcli.heads(m, "To be, or not to b"), tfcli.params("gpt2"),
           tfcli.steer(m, "To be", toward="love", away="death", block=1, max_new_tokens=3, temperature=0),
           tfcli.explore_page(m, "To be")]
assert all(any(tag in r._repr_html_() for tag in ("<svg", "<table", "<div", "<iframe")) for r in results)
out = tempfile.mkdtemp()
for i, r in enumerate(results[:-1]):
    doc = json.loads(r.save(os.path.join(out, f"{i}.json")).read_text(encoding="utf-8"))
    assert isinstance(doc, dict) and doc, (i, doc)
    if type(r).__name__ not in ("Params", "Steering"):  # the two without a picture
        assert r.save(os.path.join(out, f"{i}.svg")).read_text(encoding="utf-8").lstrip().startswith("<")
assert "<html" in results[-1].save(os.path.join(out, "page.html")).read_text(encoding="utf-8").lower()
print(sorted(n for n in sys.modules if n.split(".")[0] in ("typer", "rich", "click") or n.startswith("tfcli.cli")))
"""
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.strip() == "[]", r.stdout


def test_the_api_and_the_drawings_import_nothing_of_the_cli():
    """A notebook's `import tfcli` and every `.save(...)` work without the command line's layer: no
    module of tfcli/api or tfcli/draw imports tfcli.cli, not even inside a function (typer and rich
    stay out of a kernel that never runs a command)."""
    import ast
    from pathlib import Path

    root = Path(tfcli.__file__).parent
    wrong = []
    for path in [*(root / "api").rglob("*.py"), *(root / "draw").rglob("*.py"), root / "__init__.py"]:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom):
                module = node.module or ""
                if node.level:  # from ..cli import x, inside tfcli/api: resolved to tfcli.cli
                    here = ["tfcli", *path.relative_to(root).parent.parts]
                    module = ".".join(here[: len(here) - node.level + 1] + ([module] if module else []))
                names = [module]
                if module == "tfcli":
                    names = [f"tfcli.{a.name}" for a in node.names]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            else:
                continue
            wrong += [f"{path.relative_to(root)}:{node.lineno} {n}" for n in names
                      if n.split(".")[:2] == ["tfcli", "cli"] or n.split(".")[0] in ("typer", "rich")]
    assert not wrong, wrong


def test_load_by_name_path_and_fast():
    from pathlib import Path

    from conftest import TINY_LLAMA

    m = tfcli.load("shakespeare")
    assert m.n_blocks == m.config.n_layer == 4 and m.fast and m.sites[0] == "embed"
    slow = tfcli.load(TINY_LLAMA, fast=False)
    assert not slow.fast and "textbook" in repr(slow)
    same = tfcli.load(str(TINY_LLAMA))
    np.testing.assert_allclose(same("To be"), slow("To be"), rtol=1e-4, atol=1e-4)
    assert isinstance(Path(TINY_LLAMA), Path)


def test_tokens_and_text():
    m = tfcli.load("shakespeare")
    ids = m.to_tokens("To be")
    assert ids.dtype == np.int64 and m.tokenizer.decode(ids.tolist()) == "To be"
    assert m.to_str_tokens("To be") == m.to_str_tokens(ids) == m.to_str_tokens(ids[None]) == ["T", "o", " ", "b", "e"]
    np.testing.assert_array_equal(m("To be"), m(ids[None]))
    greedy = m.generate("To be", max_new_tokens=10, temperature=0)
    assert isinstance(greedy, str) and greedy
    assert "".join(m.generate("To be", max_new_tokens=10, temperature=0, stream=True)) == greedy
    assert m.generate("To be", max_new_tokens=10, seed=3) == m.generate("To be", max_new_tokens=10, seed=3)
    s = m.score("To be, or not to be, that is the question")
    assert np.isnan(s.logprobs[0]) and 1 < s.perplexity < 67


def test_tang_is_chinese():
    m = tfcli.load("tang")
    assert m.to_str_tokens("今天")[-2:] == ["今", "天"]


@pytest.mark.parametrize("call, needle", [
    (lambda: tfcli.load("no-such-model"), "no-such-model"),
    (lambda: tfcli.load("./no/such/folder"), "no/such/folder"),
    (lambda: tfcli.load(3), "not int"),
    (lambda: tfcli.load("shakespeare")(""), "no tokens"),
    (lambda: tfcli.load("shakespeare")("x" * 300), "context is 256"),
    (lambda: tfcli.load("shakespeare")([1, 2, 999]), "token id 999"),
    (lambda: tfcli.load("shakespeare")([[1, 2], [3, 4]]), "shape [T]"),
    (lambda: tfcli.load("shakespeare")(np.array([1.5, 2.0])), "integers"),
    (lambda: tfcli.load("shakespeare").generate("To be", max_new_tokens=0), "at least 1"),
    (lambda: tfcli.load("shakespeare").generate("To be", temperature=-1), "temperature"),
    (lambda: tfcli.load("shakespeare").chat("Hello"), "no chat template"),
    (lambda: tfcli.load("shakespeare").to_tokens(5), "takes a str"),
])  # fmt: skip
def test_bad_input_is_one_tfcli_error(call, needle):
    with pytest.raises(TfcliError, match=needle.replace("[", r"\[").replace("]", r"\]")):
        call()


def test_a_gguf_of_an_unsupported_family_is_one_tfcli_error(tmp_path, monkeypatch):
    pytest.importorskip("gguf")
    from test_gguf import write_gguf

    monkeypatch.setenv("TFCLI_HOME", str(tmp_path / "home"))
    path = write_gguf(tmp_path / "tiny.gguf", arch="gemma")
    with pytest.raises(TfcliError, match="architecture 'gemma' is not supported"):
        tfcli.load(path)
    with pytest.raises(TfcliError, match="architecture 'gemma' is not supported"):
        tfcli.load(str(path))


def test_a_gguf_runs_in_place(tmp_path, monkeypatch):
    pytest.importorskip("gguf")
    from test_gguf import write_gguf

    monkeypatch.setenv("TFCLI_HOME", str(tmp_path / "home"))
    m = tfcli.load(write_gguf(tmp_path / "tiny.gguf"))
    logits, cache = m.run_with_cache("To be")
    assert logits.shape == (len(m.to_tokens("To be")), m.config.vocab_size) and ("attn", 0) in cache


def test_chat_lays_out_the_conversation_with_the_template(tmp_path):
    """chat() renders the messages with the model's template and continues it: the same tokens as
    generating from the rendered text, greedy."""
    import shutil

    from conftest import TINY_LLAMA

    folder = tmp_path / "tiny-chat"
    shutil.copytree(TINY_LLAMA, folder)
    (folder / "chat_template.jinja").write_text("{% for m in messages %}{{ m['role'][0] }}:{{ m['content'] }}\n{% endfor %}{% if add_generation_prompt %}a:{% endif %}")
    m = tfcli.load(folder)
    reply = m.chat([{"role": "user", "content": "Hello"}], max_new_tokens=8, temperature=0)
    ids = m.tokenizer.encode("u:Hello\na:")
    assert reply == "".join(m._pieces(np.array(ids), 8, (), m._lm.chat_eos_ids(), {"temperature": 0}))
    assert m.chat("Hello", max_new_tokens=8, temperature=0) == reply
    with pytest.raises(TfcliError, match="no setting 'temprature'"):
        m.chat("Hello", temprature=0)
    with pytest.raises(TfcliError, match="messages"):
        m.chat([{"role": "user"}])
