"""Text the model's vocabulary cannot spell: said once, with a model that can; tokenize shows the
character's own bytes; an --answer that cannot be spelt is warned about."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

SHAKESPEARE = Path(__file__).parent.parent / "weights" / "shakespeare"


def test_tokenize_shows_an_unknown_characters_own_bytes(cli):
    r = cli("tokenize", "-m", "shakespeare", "今a", "--json")
    rows = json.loads(r.stdout)["tokens"]
    assert rows[0]["text"] == "<unk>" and rows[0]["bytes"] == "e4 bb 8a" and rows[0]["unknown"] == "今"
    assert rows[1] == {"id": rows[1]["id"], "text": "a", "bytes": "61", "piece": "a"}
    table = cli("tokenize", "-m", "shakespeare", "a今b").stdout
    assert "e4 bb 8a" in table and "3c 75 6e 6b 3e" not in table and "<unk> for '今'" in table



@pytest.mark.parametrize("args", [
    ["generate", "今天天气", "-n", "2"],
    ["attn", "今天天气"],
    ["tokenize", "今天"],
    ["lens", "今天天气"],
    ["score", "今天天气很好"],
])
def test_text_the_model_cannot_spell_is_said_once(cli, args):
    r = cli(*args)
    assert r.exit_code == 0, r.stderr
    warnings = [line for line in r.stderr.splitlines() if "cannot spell" in line]
    assert len(warnings) == 1 and "'今'" in warnings[0] and "-m tang" in warnings[0]
    assert "cannot spell" not in cli(*[a if a not in ("今天天气", "今天", "今天天气很好") else "To be" for a in args]).stderr



def test_ablate_warns_about_an_answer_the_vocabulary_cannot_spell(cli):
    r = cli("ablate", "-m", SHAKESPEARE, "ROMEO: I", "--answer", "天", "--json")
    assert r.exit_code == 0, r.stderr
    assert "warning: " in r.stderr and "'天'" in r.stderr and "<unk>" in r.stderr
