"""The explorer page, live: GET / is `tfcli explore`'s page with a text box on top.

Submitting the box asks the server for the pass over the new text (GET /?text=...), which runs on
the engine thread between decode steps, and the page is drawn again from it: the same page, the
same code and the same data as the static file `tfcli explore` writes, which keeps working offline.
The page itself is built by the CLI's explore code and handed in as `render(text) -> html`, so
this layer does not import the CLI.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from html import escape

from starlette.requests import Request
from starlette.responses import HTMLResponse
from starlette.routing import Route

from tfcli.engine.errors import TfcliError

from .batcher import Busy

DEFAULT_TEXT = "The capital of France is"
MAX_CHARS = 4000  # a page holds at most 128 tokens; a longer text is refused by the page's own check

FORM = """<form id="live" method="get" action="/" style="display:flex;gap:.5em;align-items:center;margin:.5em 0">
<label for="live-text">{label}</label>
<input id="live-text" name="text" value="{text}" size="60" maxlength="{max}" autofocus>
<button type="submit" id="live-run">{button}</button>
{error}</form>"""


class Page:
    def __init__(self, render: Callable[[str], str]):
        self.render = render  # text -> the whole page (cli/explore.py page_html)

    def routes(self, batcher) -> list[Route]:
        async def page(request: Request) -> HTMLResponse:
            text = request.query_params.get("text", DEFAULT_TEXT)[:MAX_CHARS] or DEFAULT_TEXT
            error, status = "", 200
            try:
                html = await asyncio.wrap_future(batcher.call(lambda: self.render(text)))
            except Busy as e:
                return HTMLResponse(f"<p>the server is busy ({escape(str(e))}); reload in a moment</p>", status_code=503, headers={"Retry-After": "1"})
            except TfcliError as e:
                error, status = f'<span id="live-error" role="alert">{escape(str(e))}</span>', 400
                html = await asyncio.wrap_future(batcher.call(lambda: self.render(DEFAULT_TEXT)))
            form = FORM.format(label="Text", text=escape(text), max=MAX_CHARS, button="Run", error=error)
            return HTMLResponse(html.replace("<header>", "<header>" + form, 1), status_code=status)

        return [Route("/", page, methods=["GET"])]
