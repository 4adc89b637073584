"""Real chat templates (llama.cpp's models/templates/, copied from the models' own repositories) render
in tfcli's sandboxed Jinja to exactly the string transformers' apply_chat_template renders; and a
template given beside a model (--template, tokenizer_config.json) is the one chat and --chat use."""

from __future__ import annotations

import json
import shutil

import pytest
from llama_cpp_vectors import llama_cpp_models  # noqa: F401 - a fixture

from conftest import TINY_LLAMA
from tfcli.engine.chat import ChatTemplate
from tfcli.engine.errors import TfcliError

SYSTEM = {"role": "system", "content": "You are a concise assistant."}
# Three turns; the last one with what JSON and HTML escape differently (tojson, autoescape).
TURNS = [
    {"role": "user", "content": "What is 2+2?"},
    {"role": "assistant", "content": "4."},
    {"role": "user", "content": "And 3+3? «ünïcødé» <b>&</b> 'quoted'"},
]
TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "The weather in a city", "parameters": {
    "type": "object", "properties": {"city": {"type": "string", "description": "The city"}}, "required": ["city"]}}}]  # fmt: skip

# The models the templates come from, with their BOS and EOS tokens (their tokenizer_config.json).
NAMED = {
    "Qwen-Qwen3-0.6B": (None, "<|im_end|>"),
    "Qwen-Qwen2.5-7B-Instruct": (None, "<|im_end|>"),
    "meta-llama-Llama-3.1-8B-Instruct": ("<|begin_of_text|>", "<|eot_id|>"),
    "meta-llama-Llama-3.2-3B-Instruct": ("<|begin_of_text|>", "<|eot_id|>"),
    "meta-llama-Llama-3.3-70B-Instruct": ("<|begin_of_text|>", "<|eot_id|>"),
    "HuggingFaceTB-SmolLM3-3B": (None, "<|im_end|>"),
    "microsoft-Phi-3.5-mini-instruct": ("<s>", "<|endoftext|>"),
    "google-gemma-2-2b-it": ("<bos>", "<eos>"),
    "google-gemma-4-31B-it": ("<bos>", "<eos>"),
    "mistralai-Mistral-Nemo-Instruct-2407": ("<s>", "</s>"),
}


def reference_tokenizer(bos: str | None, eos: str | None):
    """A transformers tokenizer whose special tokens are the model's: apply_chat_template passes them
    to the template, as it does for the model's own tokenizer."""
    from tokenizers import Tokenizer, models
    from transformers import PreTrainedTokenizerFast

    vocab = {"<unk>": 0, **{t: i + 1 for i, t in enumerate(t for t in (bos, eos) if t)}}
    return PreTrainedTokenizerFast(tokenizer_object=Tokenizer(models.WordLevel(vocab, unk_token="<unk>")), bos_token=bos, eos_token=eos)


def variants(source: str, full: bool):
    """(what, messages, variables): with and without a system message; with `full`, also each switch
    the template reads (Qwen3's enable_thinking, tool definitions)."""
    yield "a system message", [SYSTEM, *TURNS], {}
    yield "no system message", TURNS, {}
    if full and "enable_thinking" in source:
        yield "enable_thinking=False", [SYSTEM, *TURNS], {"enable_thinking": False}
        yield "enable_thinking=True", [SYSTEM, *TURNS], {"enable_thinking": True}
    if full and "tools" in source:
        yield "tools", [SYSTEM, *TURNS], {"tools": TOOLS}


def differences(source: str, bos: str | None, eos: str | None, full: bool) -> tuple[list[str], int]:
    """What differs between transformers and tfcli on each variant, with and without the generation
    prompt; a conversation transformers refuses (Gemma 2 has no system role) tfcli must refuse too.
    Also how many variants rendered (not refused)."""
    hf = reference_tokenizer(bos, eos)
    ours = ChatTemplate(source, bos or "", eos or "")
    wrong, rendered = [], 0
    for what, messages, variables in variants(source, full):
        for opening in (True, False):
            label = f"{what}, add_generation_prompt={opening}"
            try:
                want = hf.apply_chat_template(messages, chat_template=source, tokenize=False, add_generation_prompt=opening, **variables)
            except Exception:  # noqa: BLE001 - the template's own refusal, whatever its type
                with pytest.raises(TfcliError):
                    ours.render(messages, add_generation_prompt=opening, **variables)
                continue
            try:
                got = ours.render(messages, add_generation_prompt=opening, **variables)
            except TfcliError as e:
                wrong.append(f"{label}: tfcli refused ({e}), transformers rendered {want[:120]!r}")
                continue
            rendered += 1
            if got != want:
                at = next((i for i, (a, b) in enumerate(zip(got, want)) if a != b), min(len(got), len(want)))
                wrong.append(f"{label}: differs at character {at}: tfcli {got[at - 40 : at + 60]!r}, transformers {want[at - 40 : at + 60]!r}")
    return wrong, rendered


@pytest.mark.parametrize("name", sorted(NAMED))
def test_a_real_template_renders_as_transformers(name, llama_cpp_models):
    source = (llama_cpp_models / "templates" / f"{name}.jinja").read_text(encoding="utf-8")
    bos, eos = NAMED[name]
    wrong, rendered = differences(source, bos, eos, full=True)
    assert not wrong, "\n".join(wrong)
    assert rendered >= 2  # at least the conversation without a system message


def test_every_template_llama_cpp_ships_renders_as_transformers(llama_cpp_models):
    """The others (DeepSeek, Kimi, GLM, Granite, Mistral, Cohere, gpt-oss...): both conversations,
    with and without the generation prompt, `<s>`/`</s>` as the special tokens."""
    paths = sorted((llama_cpp_models / "templates").glob("*.jinja"))
    assert len(paths) >= 40
    wrong = []
    for path in paths:
        if path.stem not in NAMED:
            wrong += [f"{path.stem}: {w}" for w in differences(path.read_text(encoding="utf-8"), "<s>", "</s>", full=False)[0]]
    assert not wrong, "\n".join(wrong)


def test_qwen3_thinking_switch_changes_the_opening(llama_cpp_models):
    """enable_thinking=False opens the reply with an empty think block, as Qwen3 documents."""
    source = (llama_cpp_models / "templates" / "Qwen-Qwen3-0.6B.jinja").read_text(encoding="utf-8")
    off = ChatTemplate(source, "", "<|im_end|>").render(TURNS, enable_thinking=False)
    assert off.endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")
    assert ChatTemplate(source, "", "<|im_end|>").render(TURNS).endswith("<|im_start|>assistant\n")


def test_llama_3_dates_its_system_turn_today(llama_cpp_models):
    from datetime import datetime

    source = (llama_cpp_models / "templates" / "meta-llama-Llama-3.2-3B-Instruct.jinja").read_text(encoding="utf-8")
    text = ChatTemplate(source, "<|begin_of_text|>", "<|eot_id|>").render(TURNS)
    assert f"Today Date: {datetime.now().strftime('%d %b %Y')}" in text


# ---------------------------------------------------------------------------------------------
# A template given beside a model

TERSE = "{% for m in messages %}{{ m['role'][0] }}:{{ m['content'] }}\n{% endfor %}{% if add_generation_prompt %}a:{% endif %}"


@pytest.fixture
def terse_file(tmp_path):
    path = tmp_path / "terse.jinja"
    path.write_text(TERSE)
    return path


def prompt_tokens(text: str) -> int:
    from tfcli.store import load

    return len(load(TINY_LLAMA).tokenizer.encode(text))


def test_generate_chat_takes_a_template_file(cli, terse_file):
    r = cli("generate", "-m", TINY_LLAMA, "--chat", "Hi", "--template", terse_file, "-t", "0", "-n", "3", "--system", "Be brief.")
    assert r.exit_code == 0, r.stderr
    n = prompt_tokens("s:Be brief.\nu:Hi\na:")
    assert f"{n} prompt tokens" in r.stderr


def test_chat_takes_a_template_file(cli, terse_file):
    r = cli("chat", "-m", TINY_LLAMA, "--template", terse_file, "-t", "0", "-n", "3", input="Hello\n/bye\n")
    assert r.exit_code == 0, r.stderr
    n = prompt_tokens("u:Hello\na:")
    assert f"{n} new prompt tokens" in r.stderr


def test_chat_takes_the_template_of_tokenizer_config(cli, tmp_path):
    folder = tmp_path / "tiny-chat"
    shutil.copytree(TINY_LLAMA, folder)
    (folder / "tokenizer_config.json").write_text(json.dumps({"chat_template": TERSE, "eos_token": "</s>"}))
    r = cli("chat", "-m", folder, "-t", "0", "-n", "3", input="Hello\n/bye\n")
    assert r.exit_code == 0, r.stderr
    n = prompt_tokens("u:Hello\na:")
    assert f"{n} new prompt tokens" in r.stderr


def test_template_file_replaces_the_folders_own(cli, tmp_path, terse_file):
    folder = tmp_path / "tiny-chat"
    shutil.copytree(TINY_LLAMA, folder)
    (folder / "chat_template.jinja").write_text("{{ raise_exception('not this one') }}")
    r = cli("generate", "-m", folder, "--chat", "Hi", "--template", terse_file, "-t", "0", "-n", "2")
    assert r.exit_code == 0, r.stderr


def test_template_without_chat_is_refused(cli, terse_file):
    r = cli("generate", "-m", TINY_LLAMA, "Hi", "--template", terse_file)
    assert r.exit_code == 2 and "--template goes with --chat" in r.stderr


@pytest.mark.parametrize("content", [None, b"", b"\xff\xfe{{ x }}"])
def test_a_missing_empty_or_binary_template_file_is_one_line(cli, tmp_path, content):
    path = tmp_path / "t.jinja"
    if content is not None:
        path.write_bytes(content)
    r = cli("chat", "-m", TINY_LLAMA, "--template", path, input="Hello\n/bye\n")
    assert r.exit_code in (1, 2), r.stderr
    assert r.stderr.startswith("error: ") and r.stderr.count("\n") == 1 and "Traceback" not in r.stderr, r.stderr


# ---------------------------------------------------------------------------------------------
# What transformers' globals and filters add stays bounded


@pytest.mark.parametrize(
    "source",
    [
        "{{ range(1000)|list|tojson(indent=3000000) }}",
        "{{ range(1000)|list|tojson(separators=('x' * 1000000, ':')) }}",
        "{{ strftime_now('%c' * 1000000) }}",
    ],
)
def test_a_wide_tojson_or_date_format_is_refused_before_it_is_built(source):
    from tfcli.engine.chat import TemplateBoundError

    with pytest.raises(TemplateBoundError, match="tojson|strftime_now"):
        ChatTemplate(source).render(TURNS)


def test_namespaces_refuse_underscore_names_as_transformers_does():
    for source in ("{% set ns = namespace(_x=1) %}", "{% set ns = namespace() %}{% set ns._x = 1 %}"):
        with pytest.raises(TfcliError, match="_x"):
            ChatTemplate(source).render(TURNS)
    source = "{% set ns = namespace(n=0) %}{% for m in messages %}{% set ns.n = ns.n + 1 %}{% endfor %}{{ ns.n }}"
    assert ChatTemplate(source).render(TURNS) == "3"


def test_tojson_is_json_dumps_with_its_options():
    source = "{{ {'b': '<&>', 'a': [1, 2]}|tojson(indent=2, sort_keys=true) }}|{{ 'é'|tojson }}|{{ [1]|tojson(separators=(',', ':')) }}"
    assert ChatTemplate(source).render(TURNS) == json.dumps({"a": [1, 2], "b": "<&>"}, indent=2, sort_keys=True) + '|"é"|[1]'
