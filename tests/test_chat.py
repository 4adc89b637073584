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


# ---------------------------------------------------------------------------------------------
# tfcli chat as a user meets it: the default model, the slash commands, and a real terminal


def test_chat_defaults_to_a_chat_model(cli, chat_model, monkeypatch):
    from tfcli.cli import options

    asked = []

    def fake_load(name):
        asked.append(name)
        return load(chat_model)

    monkeypatch.setattr(options, "load_model", fake_load)
    r = cli("chat", "-t", "0", "-n", "2", input="Hi\n")
    assert r.exit_code == 0, r.stderr
    assert asked == ["smollm2"]
    assert "by default smollm2" in cli("chat", "--help").stdout


def test_chat_refuses_a_model_without_template_without_naming_a_flag_not_given(cli):
    r = cli("chat", "-m", TINY_LLAMA, input="Hi\n")
    assert r.exit_code == 2
    assert "has no chat template" in r.stderr and "--chat" not in r.stderr and "smollm2" in r.stderr


def test_slash_commands_are_not_sent_to_the_model(cli, chat_model):
    r = cli("chat", "-m", chat_model, "-t", "0", "-n", "2", input="/help\n/frobnicate\n/show\n/bye\nnever read\n")
    assert r.exit_code == 0, r.stderr
    assert "new prompt tokens" not in r.stderr  # nothing reached the model, and /bye left before the last line
    assert "/clear" in r.stderr and "/system TEXT" in r.stderr  # /help
    assert "unknown command /frobnicate" in r.stderr and "/bye" in r.stderr.split("unknown command")[1]
    assert "temperature" in r.stderr and "tiny-chat" in r.stderr  # /show


def test_set_changes_a_knob_and_a_bad_value_is_one_warning(cli, chat_model):
    r = cli("chat", "-m", chat_model, "-n", "2", input="/set temperature 0\n/set top_p 7\n/set top_k many\n/set colour blue\n/set max_tokens 1\n/show\nHi\n")
    assert r.exit_code == 0, r.stderr
    assert "temperature = 0" in r.stderr
    warnings = [line for line in r.stderr.splitlines() if line.startswith("warning:")]
    assert len(warnings) == 3 and all("nothing changed" in w for w in warnings)
    assert "top_p must be in (0, 1]" in warnings[0] and "whole number" in warnings[1] and "no setting 'colour'" in warnings[2]
    assert "1 reply" in r.stderr  # max_tokens 1 took effect, and the conversation went on


def test_set_seed_makes_replies_repeat(cli, chat_model):
    script = "/set temperature 1.5\n/set seed 3\nHi\n/clear\n/set seed 3\nHi\n"
    r = cli("chat", "-m", chat_model, "-n", "6", "--top-k", "0", "--top-p", "1", "--min-p", "0", input=script)
    assert r.exit_code == 0, r.stderr
    first, second = r.stdout.splitlines()[:2]
    assert first == second


def test_clear_and_system(cli, chat_model):
    r = cli("chat", "-m", chat_model, "-t", "0", "-n", "2", input="Hi\n/clear\nHi\n/system Be brief.\n/system\nHi\n")
    assert r.exit_code == 0, r.stderr
    stats = [line for line in r.stderr.splitlines() if "new prompt tokens" in line]
    lm = load(chat_model)
    fresh = len(lm.tokenizer.encode(lm.chat.render([{"role": "user", "content": "Hi"}])))
    assert f"(of {fresh})" in stats[1]  # /clear forgot the first turn
    assert "system message: Be brief." in r.stderr
    with_system = lm.chat.render([{"role": "system", "content": "Be brief."}] + [{"role": "user", "content": "Hi"}], add_generation_prompt=True)
    assert int(stats[2].split("(of ")[1].split(")")[0]) > len(lm.tokenizer.encode(with_system))  # system + turn 2 + new turn


def test_a_message_starting_with_a_slash_can_be_sent(cli, chat_model):
    r = cli("chat", "-m", chat_model, "-t", "0", "-n", "2", input="//usr/bin\n")
    assert r.exit_code == 0, r.stderr
    assert "new prompt tokens" in r.stderr and "unknown command" not in r.stderr


def test_piped_statistics_line_is_not_wrapped(cli, chat_model):
    r = cli("chat", "-m", chat_model, "-t", "0", "-n", "30", input="Hello there, how are you today?\n")
    assert r.exit_code == 0, r.stderr
    line = next(line for line in r.stderr.splitlines() if "new prompt tokens" in line)
    assert "stopped:" in line  # the whole line, not cut at 80 columns


@pytest.fixture
def terminal(chat_model, tmp_path):
    """`tfcli chat` in a pseudo-terminal, as a user at a terminal runs it."""
    import os
    import sys

    pexpect = pytest.importorskip("pexpect")
    env = dict(os.environ, TFCLI_HOME=str(tmp_path / "home"), NO_COLOR="1", TERM="xterm", PYTHONPATH=os.pathsep.join(sys.path))
    spawned = []

    def start():
        child = pexpect.spawn(
            sys.executable, ["-m", "tfcli", "chat", "-m", str(chat_model), "-t", "0", "-n", "2"],
            env=env, encoding="utf-8", timeout=30, dimensions=(24, 200),
        )  # fmt: skip
        child.expect_exact("> ")
        spawned.append(child)
        return child

    yield start
    for child in spawned:
        child.close(force=True)


def _until_prompt(child) -> str:
    child.expect_exact("\n> ")
    return child.before


def test_terminal_arrow_keys_edit_the_line_and_history_recalls_it(terminal):
    child = terminal()
    child.send("/sytem\x1b[D\x1b[D\x1b[Ds\r")  # three times left, insert 's': /system
    shown = _until_prompt(child)
    assert "no system message" in shown and "^[[D" not in shown and "unknown command" not in shown
    child.send("/show\r")
    _until_prompt(child)
    child.send("\x1b[A\x1b[A\r")  # up twice: /system again
    assert "no system message" in _until_prompt(child)
    child.sendeof()
    child.expect(pexpect_eof())
    child.close()
    assert child.exitstatus == 0


def test_terminal_help_unknown_word_and_bye(terminal):
    child = terminal()
    child.send("/help\r")
    assert "/bye" in _until_prompt(child)
    child.send("/frob\r")
    assert "unknown command /frob" in _until_prompt(child)
    child.send("/bye\r")
    child.expect(pexpect_eof())
    child.close()
    assert child.exitstatus == 0


def test_terminal_ctrl_d_ends_the_line(terminal):
    child = terminal()
    child.sendeof()
    child.expect(pexpect_eof())
    assert child.before.startswith("\r\n")  # the shell's prompt will not be glued to "> "
    child.close()
    assert child.exitstatus == 0


def test_terminal_ctrl_c_at_the_prompt_asks_for_bye_and_a_second_one_leaves(terminal):
    child = terminal()
    child.sendintr()
    child.expect_exact("use /bye or Ctrl-D to leave")
    assert child.before.startswith("\r\n") or child.before.startswith("^C\r\n")  # the "> " line ended
    child.expect_exact("> ")
    child.send("/help\r")  # the conversation goes on
    assert "/bye" in _until_prompt(child)
    child.sendintr()
    child.expect_exact("use /bye")  # a Ctrl-C after a command is a first one again
    child.expect_exact("> ")
    child.sendintr()
    child.expect(pexpect_eof())
    child.close()
    assert child.exitstatus == 130


def pexpect_eof():
    import pexpect

    return pexpect.EOF


def test_a_message_longer_than_the_context_is_named_and_the_chat_goes_on(cli, chat_model):
    """A huge line is the message's fault: one warning naming its size, never a --max-tokens the
    user did not give, and the next message is answered."""
    r = cli("chat", "-m", chat_model, "-t", "0", "-n", "4", input="x" * 100_000 + "\nHello\n/bye\n")
    assert r.exit_code == 0, r.stderr
    assert "--max-tokens" not in r.stderr and "Traceback" not in r.stderr
    assert "the message is" in r.stderr and "not sent" in r.stderr
    assert sum("new prompt tokens" in line for line in r.stderr.splitlines()) == 1  # "Hello" was answered


def test_chat_lookup_gives_the_same_replies(cli, chat_model):
    turns = "Hello hello hello\nSay it again\n/bye\n"
    plain = cli("chat", "-m", chat_model, "-t", "0", "-n", "8", input=turns)
    fast = cli("chat", "-m", chat_model, "-t", "0", "-n", "8", "--lookup", input=turns)
    assert plain.exit_code == fast.exit_code == 0, fast.stderr
    assert fast.stdout == plain.stdout and "drafted tokens accepted" in fast.stderr
