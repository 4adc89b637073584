"""Nothing from a file or an argument reaches the terminal raw: escape sequences, newlines, Rich
markup and emoji codes in a model path, a config value or a tensor name are shown as text (ESC as
\\x1b), so that a name can neither drive the terminal (clear it, write the clipboard) nor forge a
second `error:` line."""

from __future__ import annotations

import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

from badinput import Cases, Env, edit_config, gen, raw_control, run_case, run_tfcli, assert_one_line
from conftest import TINY_GPT2

CASES = Cases()

CLEAR = "\x1b[2J"  # clears the screen
CLIPBOARD = "\x1b]52;c;aGk=\x07"  # OSC 52: writes the clipboard


@CASES.case(1, "no such folder: ./\\x1b[2Jmodel\\x1b]52;c;aGk=\\x07", "check the path")
def path_with_escape_sequences(env):
    return gen(f"./{CLEAR}model{CLIPBOARD}")


@CASES.case(1, "no such folder: ./a\\nerror: forged", "check the path")
def path_with_a_newline_that_forges_an_error_line(env):
    return gen("./a\nerror: forged")


@CASES.case(1, "no such folder: ./my:x:model:thumbs_up:", "check the path")
def path_with_emoji_codes(env):
    return gen("./my:x:model:thumbs_up:")


@CASES.case(1, "no such folder: ./[bold red]model[/]", "check the path")
def path_with_rich_markup(env):
    return gen("./[bold red]model[/]")


@CASES.case(1, "unknown model 'a\\x1b[2Jb'", "known models")
def name_with_escape_sequences(env):
    return gen(f"a{CLEAR}b")


@CASES.case(1, "model_type '\\x1b[2Jgpt' is not supported", "tfcli runs these model types")
def config_value_with_escape_sequences(env):
    return gen(edit_config(env.model(), model_type=f"{CLEAR}gpt", architectures=[]))


@CASES.case(1, "m\\r\\x08odel has no config.json", "a model folder holds")
def folder_with_carriage_return_and_backspace(env):
    m = env.model()
    bad = m.parent / "m\r\x08odel"
    m.rename(bad)
    (bad / "config.json").unlink()
    return gen(bad)


@pytest.mark.parametrize("make, code, needles", CASES)
def test_bad_input_is_one_line_with_the_fix(cli, tmp_path, monkeypatch, make, code, needles):
    run_case(cli, tmp_path, monkeypatch, make, code, needles)


def _with_tensor_named(tmp_path, name: str):
    m = Env(tmp_path, None).model()
    weights = load_file(m / "model.safetensors")
    weights[name] = np.zeros((2,), np.float32)
    save_file(weights, m / "model.safetensors")
    return m


def test_an_unused_tensor_named_with_escape_codes_is_shown_escaped(cli, tmp_path):
    m = _with_tensor_named(tmp_path, f"evil{CLEAR}\n:thumbs_up:[red]x")
    r = cli(*gen(m, "-n", "2", "-q"))
    assert r.exit_code == 0, r.stderr
    assert r.stderr == "warning: 1 tensor(s) in the checkpoint are not used by a gpt2 model: evil\\x1b[2J\\n:thumbs_up:[red]x\n"


def test_params_from_shows_tensor_names_escaped(cli, tmp_path):
    """`params --from` lists the tensors it cannot categorise: their names go to stdout escaped."""
    m = _with_tensor_named(tmp_path, f"evil{CLEAR}{CLIPBOARD}:x:")
    r = cli("params", "--from", m)
    assert r.exit_code == 1 and "Traceback" not in r.stderr, r.stderr  # 1: the tensors differ from the count
    assert not raw_control(r.stdout + r.stderr), repr(r.stdout)
    assert "not categorised: evil\\x1b[2J\\x1b]52;c;aGk=" in r.stdout  # (Rich drops the BEL itself)


def test_a_real_terminal_gets_no_escape_from_a_name(tmp_path):
    """Through the real entry point, stderr a pipe: the bytes of the error line hold no ESC."""
    r = run_tfcli(tmp_path, *gen(f"./{CLEAR}{CLIPBOARD}x"))
    assert_one_line(r.stderr, r.returncode, 1, b"\\x1b[2J")
    assert b"\x1b" not in r.stderr and b"\x07" not in r.stderr


def test_generated_text_for_a_terminal_keeps_lines_and_escapes_controls():
    """The helper a command uses when stdout is a terminal (a pipe gets the model's text unchanged)."""
    from tfcli.cli.console import for_terminal

    assert for_terminal("plain text 今天 👍\n\tindented") == "plain text 今天 👍\n\tindented"
    assert for_terminal(f"a{CLEAR}b{CLIPBOARD}\r\u202e") == "a\\x1b[2Jb\\x1b]52;c;aGk=\\x07\\r\\u202e"
    assert "".join(for_terminal(part) for part in ["x\x1b", "[2J"]) == "x\\x1b[2J"  # split across tokens


@pytest.mark.parametrize("columns, width", [("50", 50), ("200", 200), ("0", 80), ("-5", 80), (None, 80)])
def test_the_consoles_follow_the_width_set_after_they_are_made(monkeypatch, columns, width):
    """Rich reads COLUMNS once, when a console is made; tfcli's consoles (made at import) read it
    each time, so a run in a process that imported them earlier (a test, a library caller) draws
    to the width of its own environment."""
    from tfcli.cli.console import Console, err, out

    monkeypatch.setenv("COLUMNS", "37")
    made = Console(stderr=True)  # made while COLUMNS is 37, as the import may be
    assert (out.width, err.width, made.width) == (37, 37, 37)
    if columns is None:
        monkeypatch.delenv("COLUMNS")
    else:
        monkeypatch.setenv("COLUMNS", columns)
    assert (out.width, err.width, made.width) == (width, width, width)
