"""What the engine thread tells a request's handler (serve/batcher.py -> serve/app.py, serve/shapes.py):
the prompt's log-probabilities, each token as it is drawn, each choice's end, a failure, the end."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class TokenLogprob:
    token: int
    logprob: float
    top: list[tuple[int, float]]  # the N most likely tokens and their log-probabilities, most likely first


@dataclass
class Echoed:
    """The prompt's tokens and their log-probabilities (None for the first: nothing predicts it)."""

    prompt: int  # which prompt of the job
    tokens: list[int]
    logprobs: list[TokenLogprob | None]


@dataclass
class Token:
    choice: int
    token: int
    text: str  # text this token releases ("" while a character or a possible stop string is incomplete)
    logprob: TokenLogprob | None


@dataclass
class Done:
    choice: int
    finish_reason: str  # "stop", "length", or "abort" when the server stops
    completion_tokens: int


@dataclass
class Failed:
    message: str
    status: int = 500


@dataclass
class Finished:
    """The job has nothing more to say."""


Event = Echoed | Token | Done | Failed | Finished
