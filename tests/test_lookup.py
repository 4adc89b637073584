"""Lookup decoding (engine/lookup.py, generate --lookup): guesses from the context change no output."""

from __future__ import annotations

import numpy as np
import pytest

from conftest import TINY_GPT2, TINY_LLAMA, one_line_error
from tfcli.engine.generate import Generation, Session
from tfcli.engine.lookup import Drafter, find_continuation
from tfcli.engine.sampling import Sampler, SamplingParams, speculative_choice
from tfcli.store import load

PROMPTS = {
    "shakespeare": [
        "ROMEO:\nBut soft, what light through yonder window breaks?\nROMEO:\nBut soft,",  # repeats
        "KING HENRY:\nOnce more unto the breach, dear friends, once more;\nKING HENRY:\nOnce more",
        "First Citizen:\nWe are accounted poor citizens, the patricians good.\nFirst Citizen:\nWe are",
        "ROMEO:",
        "Zyx",  # nothing to look up
        "To be, or not to be",
    ],
    "tang": ["床前明月光，疑是地上霜。举头望明月，低头思故乡。床前明月光，", "春眠不觉晓", "白日依山尽，黄河入海流。白日", "秋"],
    TINY_GPT2: ["The cat sat on the mat. The cat sat on", "Hello"],
    TINY_LLAMA: ["one two three one two three one two", "The"],
}


def _run(lm, prompt: str, params: SamplingParams, n: int, lookup: bool):
    gen = Generation(Session(lm.model), lm.tokenizer, lm.tokenizer.prompt(prompt), Sampler(params), n,
                     eos_ids=lm.config.eos_token_ids, lookup=Drafter() if lookup else None)  # fmt: skip
    return [s.token for s in gen], gen.stats


@pytest.mark.parametrize("name", list(PROMPTS), ids=["shakespeare", "tang", "gpt2", "llama"])
def test_greedy_lookup_is_plain_greedy_token_for_token(name):
    lm = load(name)
    drafted = accepted = 0
    for prompt in PROMPTS[name]:
        plain, _ = _run(lm, prompt, SamplingParams(temperature=0), 40, lookup=False)
        looked, stats = _run(lm, prompt, SamplingParams(temperature=0), 40, lookup=True)
        assert looked == plain, prompt
        drafted, accepted = drafted + stats.drafted, accepted + stats.accepted
    assert drafted > 0  # guesses were made and checked
    if name in ("shakespeare", "tang"):
        assert accepted > 0


@pytest.mark.parametrize("name", ["shakespeare", "tang", TINY_LLAMA], ids=["shakespeare", "tang", "llama"])
def test_sampled_lookup_is_plain_sampling_with_the_same_seed(name):
    """The acceptance rule draws as plain sampling does, so a seed gives the same text (filters and
    a repetition penalty included: the history a guess is checked against is the real one)."""
    lm = load(name)
    for prompt, params in zip(PROMPTS[name], (SamplingParams(temperature=0.8, seed=1), SamplingParams(temperature=1.2, top_k=0, top_p=1, min_p=0, seed=2),
                                              SamplingParams(temperature=0.7, repetition_penalty=1.3, seed=3))):  # fmt: skip
            plain, _ = _run(lm, prompt, params, 30, lookup=False)
            looked, _ = _run(lm, prompt, params, 30, lookup=True)
            assert looked == plain, (prompt, params)


def test_find_continuation_takes_the_latest_longest_match():
    h = np.array([1, 2, 3, 9, 1, 2, 3, 7, 8, 5, 2, 3])
    assert find_continuation(h, 3, 4) == [7, 8, 5, 2]  # last 3 "5 2 3" never occurred: "2 3" did, latest at 5
    assert find_continuation(np.array([4, 4, 4]), 3, 5) == [4]  # "4 4" at 0, followed by one 4
    assert find_continuation(np.array([1, 2, 3]), 3, 4) == []  # no earlier occurrence of 3
    assert find_continuation(np.array([5]), 3, 4) == []
    assert find_continuation(np.array([6, 1, 6]), 3, 1) == [1]  # the limit


def test_drafting_backs_off_when_guesses_fail_and_recovers():
    d = Drafter()
    history = [1, 2, 3, 4, 5, 6, 7, 8, 9, 1, 2]
    assert d.draft(history, 100) == [3, 4, 5, 6]  # "1 2" occurred before; 4 tokens to start with
    d.update(4, 0)  # the first guess was wrong: pause one step
    assert d.draft(history, 100) == []
    assert d.draft(history, 100) != []
    d.update(4, 0)
    assert [d.draft(history, 100) for _ in range(3)][:2] == [[], []]  # paused two steps now
    d.update(3, 3)  # all kept: no pause, longer guesses
    assert d.misses == 0 and d.length == 8
    assert d.draft(history, 100) == [3, 4, 5, 6, 7, 8, 9, 1]
    assert d.draft(history, 2) == [3, 4]  # never more than the room left
    assert d.draft(history, 0) == []


class GridRng:
    """Uniform draws at the midpoints of M equal cells: the probability of an outcome that depends
    on one draw is then its measure over [0, 1) to within 1/M."""

    def __init__(self, m: int):
        self.values = iter((np.arange(m) + 0.5) / m)

    def random(self):
        return next(self.values)


@pytest.mark.parametrize("params", [SamplingParams(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0), SamplingParams(temperature=0.6, top_k=4, top_p=0.9, min_p=0.0)])
def test_acceptance_rule_against_exact_probabilities(params):
    """On a six-token vocabulary: a drafted token x is accepted with probability p(x), and on
    rejection the token is drawn from p with x removed, renormalised, where p is the sampler's
    distribution (filters included)."""
    logits = np.array([2.0, 1.5, 0.3, -0.5, 1.0, -2.0], dtype=np.float32)
    sampler = Sampler(params)
    p = sampler.final_probs(logits, [])  # [V] the exact distribution sampled from
    m = 4_000
    for x in range(len(logits)):
        sampler.rng = GridRng(m)
        outcomes = [speculative_choice(sampler, logits, [], x) for _ in range(m)]
        accepted = np.mean([ok for _, ok in outcomes])
        assert abs(accepted - p[x]) <= 2 / m
        rejected = np.bincount([t for t, ok in outcomes if not ok], minlength=len(logits)) / m  # P(reject and y)
        want = np.where(np.arange(len(p)) == x, 0.0, p)  # p(y) for y != x ...
        assert np.allclose(rejected, want, atol=2 / m)  # ... = (1 - p(x)) * p(y) / (1 - p(x))
        assert all(ok == (t == x) for t, ok in outcomes)


def test_acceptance_rule_with_random_draws_keeps_the_distribution():
    logits = np.array([0.5, 0.0, -0.3, 1.2], dtype=np.float32)
    sampler = Sampler(SamplingParams(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0, seed=0))
    p = sampler.final_probs(logits, [])
    n = 40_000
    tokens = [speculative_choice(sampler, logits, [], 3)[0] for _ in range(n)]
    freq = np.bincount(tokens, minlength=4) / n
    assert np.all(np.abs(freq - p) <= 4 * np.sqrt(p * (1 - p) / n))


def test_lookup_cli_reports_drafted_and_accepted(cli):
    prompt = "ROMEO:\nBut soft, what light through yonder window breaks?\nROMEO:\nBut soft,"
    plain = cli("generate", prompt, "-t", "0", "-n", "60")
    r = cli("generate", prompt, "-t", "0", "-n", "60", "--lookup")
    assert r.exit_code == 0, r.stderr
    assert r.stdout == plain.stdout
    line = r.stderr.strip().splitlines()[-1]
    assert "lookup:" in line and "drafted tokens accepted" in line


def test_lookup_near_a_full_context(cli):
    """Guesses never go past the cache: a prompt that leaves room for two tokens still decodes."""
    lm = load(TINY_GPT2)
    n_ctx = lm.config.n_ctx
    text = lm.tokenizer.decode(([15, 16, 17] * n_ctx)[: n_ctx - 1])
    ids = lm.tokenizer.prompt(text)
    assert len(ids) == n_ctx - 1
    plain = cli("generate", "-m", TINY_GPT2, text, "-t", "0", "-n", "2")
    r = cli("generate", "-m", TINY_GPT2, text, "-t", "0", "-n", "2", "--lookup")
    assert r.exit_code == 0 and r.stdout == plain.stdout




def test_lookup_with_a_full_context_is_refused_in_one_line(cli):
    lm = load(TINY_GPT2)
    text = lm.tokenizer.decode(([15, 16, 17] * lm.config.n_ctx)[: lm.config.n_ctx])
    one_line_error(cli("generate", "-m", TINY_GPT2, text, "-t", "0", "-n", "5", "--lookup"), 2, "--max-tokens", "context")
    one_line_error(cli("generate", "-m", TINY_GPT2, "Hi", "--lookup", "--slide"), 2, "--lookup", "--slide")


SMOLLM2_PROMPTS = [
    "Repeat this sentence exactly: The quick brown fox jumps over the lazy dog near the river bank.",
    "Fix the spelling and repeat the rest unchanged: Teh weather was nice, so we walkd to the park and sat by the lake.",
    "Here is a list: apples, pears, plums, cherries. Write the list again in reverse order.",
    "def add(a, b):\n    return a + b\n\nRewrite this function with type hints.",
    "What is the capital of France?",
    "Write a haiku about winter.",
]


@pytest.mark.slow
def test_smollm2_greedy_lookup_is_plain_greedy(smollm2_folder):
    """Six chat prompts, four that invite repeating the context and two that do not."""
    lm = load(smollm2_folder)
    accepted = 0
    for text in SMOLLM2_PROMPTS:
        ids = lm.tokenizer.encode(lm.chat.render([{"role": "user", "content": text}], add_generation_prompt=True))
        runs = []
        for lookup in (False, True):
            gen = Generation(Session(lm.model), lm.tokenizer, ids, Sampler(SamplingParams(temperature=0)), 32,
                             eos_ids=lm.chat_eos_ids(), lookup=Drafter() if lookup else None)  # fmt: skip
            runs.append([s.token for s in gen])
        assert runs[1] == runs[0], text
        accepted += gen.stats.accepted
    assert accepted > 10
