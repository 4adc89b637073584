"""A sample's seed: shown with the sample and drawing it again, -1 draws one, greedy has none."""

from __future__ import annotations

import json
import re


def _seed(stderr: str) -> int:
    return int(re.search(r"· seed (\d+)", stderr).group(1))


def test_a_sample_shows_its_seed_and_the_seed_gives_it_again(cli):
    r = cli("generate", "ROMEO:", "-n", "20")
    assert r.exit_code == 0, r.stderr
    seed = _seed(r.stderr)
    again = cli("generate", "ROMEO:", "-n", "20", "--seed", str(seed))
    assert again.stdout == r.stdout and _seed(again.stderr) == seed
    doc = json.loads(cli("generate", "ROMEO:", "-n", "5", "--seed", str(seed), "--json").stdout)
    assert doc["stats"]["seed"] == seed


def test_seed_minus_one_draws_a_seed(cli):
    r = cli("generate", "ROMEO:", "-n", "5", "--seed", "-1")
    assert r.exit_code == 0, r.stderr
    assert _seed(r.stderr) >= 0
    assert cli("generate", "ROMEO:", "-n", "5", "--seed", "-2").exit_code == 2


def test_greedy_has_no_seed_to_show(cli):
    r = cli("generate", "ROMEO:", "-n", "3", "-t", "0")
    assert r.exit_code == 0 and "seed" not in r.stderr
    assert json.loads(cli("generate", "ROMEO:", "-n", "3", "-t", "0", "--json").stdout)["stats"]["seed"] is None
