"""Lookup decoding: guess the next tokens from the context itself, and check the guesses in one pass.

When a text repeats what is already in its context (quoting, editing, summarising, code), the
tokens that followed the last few tokens the previous time they occurred are a good guess for
what comes next (prompt lookup decoding, Saxena 2023; llama.cpp's `llama-lookup`, transformers'
`prompt_lookup_num_tokens`). The guesses and the token before them go through the model in one
forward pass, which costs about one decode step because a step is bound by reading the weights;
the logits after each guess then say what the sampler would have drawn there.

Whether a guess is kept is the speculative-sampling rule for a draft that puts all its
probability on one token (engine/sampling.py, `speculative_choice`), so the output is the output
of plain decoding: token for token with greedy decoding, and with a seed too, since the sampler
draws exactly as it would have without guesses.

`Drafter` only guesses; engine/generate.py runs the check and rolls the KV cache back over the
guesses that were not drawn.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

MAX_DRAFT = 8  # the longest guess: a pass over 1 + 8 tokens still costs about one decode step on a small model
MAX_NGRAM = 3  # match the last 3 tokens, else 2, else 1 (transformers' default is 2)
MAX_PAUSE = 16  # after repeated misses, decode up to this many tokens plainly before guessing again


@dataclass
class Drafter:
    """Guesses from the history, with a length that follows how well guessing has gone.

    A guess that is drawn in full lets the next one be twice as long (up to max_draft); a partial
    one sets the length to what was kept plus one; a guess whose first token is wrong pauses
    guessing for 1, 2, 4 ... steps (up to MAX_PAUSE), so that a text with no repeats pays for few
    wasted checks, and the first kept token ends the pause.
    """

    max_draft: int = MAX_DRAFT
    max_ngram: int = MAX_NGRAM
    length: int = 4  # tokens the next guess may have
    pause: int = 0  # steps left without guessing
    misses: int = 0  # guesses in a row whose first token was wrong

    def draft(self, history: list[int], room: int) -> list[int]:
        """Up to min(length, room) tokens that followed the most recent earlier occurrence of the
        history's last n tokens, for the longest n (max_ngram down to 1) that occurred before."""
        limit = min(self.length, room)
        if limit < 1:
            return []
        if self.pause > 0:
            self.pause -= 1
            return []
        return find_continuation(np.asarray(history), self.max_ngram, limit)

    def update(self, drafted: int, accepted: int) -> None:
        """What became of the last guess: `accepted` of its `drafted` tokens were drawn."""
        if drafted == 0:
            return
        if accepted == drafted:
            self.length = min(self.max_draft, 2 * self.length)
            self.misses = 0
        elif accepted > 0:
            self.length = max(1, accepted + 1)
            self.misses = 0
        else:
            self.misses += 1
            self.pause = min(MAX_PAUSE, 2 ** (self.misses - 1))


def find_continuation(history: np.ndarray, max_ngram: int, limit: int) -> list[int]:
    """history [N] -> the (up to) `limit` tokens after the latest earlier match of its last n tokens.

    A match starts at i < N - n with history[i:i+n] equal to the last n tokens; the latest one is
    taken (recent text is the likeliest to be repeated). Vectorised: one comparison of the whole
    history per matched position, a few microseconds for thousands of tokens.
    """
    n_hist = len(history)
    for n in range(min(max_ngram, n_hist - 1), 0, -1):
        tail = history[n_hist - n :]  # [n]
        match = history[: n_hist - n] == tail[0]  # [N - n]: starts i with a token after the match
        for j in range(1, n):
            match &= history[j : n_hist - n + j] == tail[j]
        starts = np.flatnonzero(match)
        if len(starts):
            i = int(starts[-1]) + n  # first token after the match
            return history[i : i + limit].tolist()
    return []
