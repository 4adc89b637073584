"""The explorer page, live: GET / (filled in below)."""

from __future__ import annotations


class Page:
    def __init__(self, lm, name: str):
        self.lm, self.name = lm, name

    def routes(self, batcher) -> list:
        return []
