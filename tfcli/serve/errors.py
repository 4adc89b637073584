"""The API's errors in OpenAI's shape (https://platform.openai.com/docs/guides/error-codes):
{"error": {"message", "type", "param", "code"}}; each names the field (`param`) it refused."""

from __future__ import annotations

from tfcli.engine.errors import shown

QUOTE_CHARS = 2_000  # a message quotes at most this much of a value (the README's bound on echoed text)


class ApiError(Exception):
    def __init__(
        self,
        status: int,
        message: str,
        param: str | None = None,
        code: str | None = None,
        kind: str = "invalid_request_error",
        headers: dict | None = None,
    ):
        super().__init__(message)
        self.status, self.message, self.param, self.code, self.kind = status, message, param, code, kind
        self.headers = headers or {}

    def body(self) -> dict:
        return {"error": {"message": self.message, "type": self.kind, "param": self.param, "code": self.code}}


def bad(message: str, param: str | None = None, code: str | None = None) -> ApiError:
    return ApiError(400, message, param, code)


def quoted(value) -> str:
    """A value for a message: its repr, cut to QUOTE_CHARS (a 100,000-character value is not echoed whole)."""
    return shown(value, QUOTE_CHARS)
