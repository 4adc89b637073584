"""Greedy --samples: temperature 0 draws nothing, so N greedy samples are one text N times. generate
says so in one line on stderr (in Chinese under zh) and labels no greedy sample with a seed; a
sampled one beside it keeps its seed, and samples that differ are not called identical."""

from __future__ import annotations

import re


def samples(stdout: str) -> dict[str, str]:
    """{label: text} of the samples generate prints one under another ('── sample 1 · T=0 ──')."""
    parts = re.split(r"^── (.+?) ──\n", stdout, flags=re.MULTILINE)[1:]
    return dict(zip(parts[::2], (p.rstrip("\n") for p in parts[1::2]), strict=True))


def test_greedy_samples_are_said_identical_with_no_seed(cli):
    r = cli("generate", "ROMEO:", "-t", "0", "--samples", "3", "-n", "8", "--seed", "5")
    assert r.exit_code == 0, r.stderr
    got = samples(r.stdout)
    assert list(got) == ["sample 1", "sample 2", "sample 3"]  # no seed: greedy decoding draws none
    assert len(set(got.values())) == 1 and next(iter(got.values())).startswith("ROMEO:")
    said = " ".join(r.stderr.split())
    assert said.count("the 3 greedy samples (T=0) are identical") == 1, r.stderr
    assert "seed" not in r.stdout + r.stderr


def test_a_sampled_sample_beside_a_greedy_one_keeps_its_seed(cli):
    r = cli("generate", "ROMEO:", "-t", "0,0.8", "-n", "8", "--seed", "5")
    assert r.exit_code == 0, r.stderr
    labels = list(samples(r.stdout))
    assert labels[0] == "sample 1 · T=0" and re.fullmatch(r"sample 2 · T=0\.8 · seed \d+", labels[1]), labels
    assert "identical" not in r.stderr  # one greedy sample: nothing to call identical


def test_sampled_samples_are_not_called_identical(cli):
    r = cli("generate", "ROMEO:", "-t", "1", "--samples", "2", "-n", "8", "--seed", "5")
    assert r.exit_code == 0, r.stderr
    assert "identical" not in r.stderr and all("· seed " in label for label in samples(r.stdout))


def test_identical_in_chinese(cli):
    r = cli("generate", "-m", "tang", "床前", "-t", "0", "--samples", "2", "-n", "4", "--lang", "zh")
    assert r.exit_code == 0, r.stderr
    assert "2个贪心样本（T=0）完全相同" in "".join(r.stderr.split())
    assert "种子" not in r.stdout and "seed" not in r.stdout
