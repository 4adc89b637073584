"""Chat: the template layout, --chat, and the KV cache kept across turns."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from conftest import TINY_LLAMA
from tfcli.store import load
from tfcli.engine.generate import Generation, Session
from tfcli.engine.sampling import Sampler, SamplingParams

CHATML = (
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)


# A terse layout for the tiny model, whose 128-token context would not hold ChatML's markers spelled in bytes.
TERSE = "{% for m in messages %}{{ m['role'][0] }}:{{ m['content'] }}\n{% endfor %}{% if add_generation_prompt %}a:{% endif %}"


@pytest.fixture
def chat_model(tmp_path):
    """The tiny Llama with a chat template."""
    folder = tmp_path / "tiny-chat"
    shutil.copytree(TINY_LLAMA, folder)
    (folder / "chat_template.jinja").write_text(TERSE)
    return folder


def test_chatml_template_renders_the_conversation(tmp_path):
    from tfcli.engine.chat import load_chat_template

    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"chat_template": CHATML, "eos_token": "<|im_end|>"}))
    template = load_chat_template(tmp_path)
    assert template.eos_token == "<|im_end|>"
    text = template.render([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}])
    assert text == "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"


def test_session_reuses_the_cache_and_matches_a_fresh_run(chat_model):
    lm = load(chat_model)
    tok = lm.tokenizer
    first = tok.encode(lm.chat.render([{"role": "user", "content": "Hello there"}]))
    session = Session(lm.model)
    gen = Generation(session, tok, first, Sampler(SamplingParams(temperature=0)), 12)
    reply = tok.decode([s.token for s in gen])
    second = tok.encode(
        lm.chat.render(
            [{"role": "user", "content": "Hello there"}, {"role": "assistant", "content": reply}, {"role": "user", "content": "And then?"}]
        )
    )
    logits, computed = session.prefill(second)
    assert computed < len(second) - len(first) + 20  # only the new turn (and the reply's tail) was computed
    fresh, n = Session(lm.model).prefill(second)
    assert n == len(second)
    assert np.abs(logits - fresh).max() <= 1e-5


def test_generate_chat_flag(cli, chat_model):
    r = cli("generate", "-m", chat_model, "--chat", "Hi", "-t", "0", "-n", "5", "--system", "Be brief.")
    assert r.exit_code == 0, r.stderr
    lm = load(chat_model)
    text = lm.chat.render([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}])
    assert f"{len(lm.tokenizer.encode(text))} prompt tokens" in r.stderr


def test_chat_without_template_is_refused(cli):
    r = cli("generate", "-m", TINY_LLAMA, "--chat", "Hi")
    assert r.exit_code == 2 and "no chat template" in r.stderr


def test_system_without_chat_is_refused(cli):
    r = cli("generate", "-m", TINY_LLAMA, "Hi", "--system", "x")
    assert r.exit_code == 2 and "--system goes with --chat" in r.stderr


def test_chat_command_reads_turns_from_stdin(cli, chat_model):
    r = cli("chat", "-m", chat_model, "-t", "0", "-n", "4", input="Hello\nWhat next?\n/exit\n")
    assert r.exit_code == 0, r.stderr
    stats = [line for line in r.stderr.splitlines() if "new prompt tokens" in line]
    assert len(stats) == 2
    # the second turn computed only part of the conversation: "N new prompt tokens (of M)" with N < M
    n, m = (int(x) for x in stats[1].replace("(of ", "").replace(")", "").split()[:5:4])
    assert n < m
