"""The explorer page, live: GET / is `tfcli explore`'s page with a text box on top.

Submitting the box asks the server for the pass over the new text (GET /?text=...), which runs on
the engine thread between decode steps, and the page is drawn again from it: the same page, the
same code and the same data as the static file `tfcli explore` writes, which keeps working offline.

The box can also steer the pass (`tfcli steer`'s experiment): with two texts, a block and a
strength (GET /?text=...&toward=...&away=...&layer=I&scale=C), C times the difference of the two
texts' mean residual streams after block I is added to that block's output at every position, and
the attention, the lens and the next-token candidates are those of the steered pass.

The page itself is built by the CLI's explore code and handed in as `render(text, hooks) -> html`
(hooks: the steering's, or None), and the steering as `steer(toward, away, layer, scale) ->
Steering`, so this layer does not import the CLI.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable
from html import escape

from starlette.requests import Request
from starlette.responses import HTMLResponse
from starlette.routing import Route

from tfcli.engine.errors import TfcliError, UsageError

from .batcher import Busy

DEFAULT_TEXT = "The capital of France is"
MAX_CHARS = 4000  # a page holds at most 128 tokens; a longer text is refused by the page's own check
MAX_SCALE = 32.0  # the strength slider's range, either way

FORM = """<form id="live" method="get" action="/"
 style="display:flex;flex-wrap:wrap;gap:.5em;align-items:center;margin:.5em 0">
<label for="live-text">Text</label>
<input id="live-text" name="text" value="{text}" size="60" maxlength="{max}" autofocus>
<button type="submit" id="live-run">Run</button>
{steer_box}{error}</form>"""

STEER_BOX = """<details id="live-steer"{open} style="flex-basis:100%"><summary>Steer the pass</summary>
<label for="live-toward">toward</label>
<input id="live-toward" name="toward" value="{toward}" size="14" maxlength="200">
<label for="live-away">away from</label> <input id="live-away" name="away" value="{away}" size="14" maxlength="200">
<label for="live-layer">after block</label>
<input id="live-layer" name="layer" type="number" min="0" max="{last}" value="{layer}" style="width:4em">
<label for="live-scale">strength</label>
<input id="live-scale" name="scale" type="range" min="-{cap:g}" max="{cap:g}" step="0.5" value="{scale:g}"
 oninput="this.nextElementSibling.value=this.value">
<output for="live-scale">{scale:g}</output>
<button type="submit" id="live-steer-run">Steer</button>
{steered}</details>
"""


class Page:
    def __init__(self, render: Callable, steer: Callable | None = None, n_layer: int = 1):
        self.render = render  # (text, hooks or None) -> the whole page (cli/explore.py page_html)
        # (toward, away, layer, scale) -> a Steering (analysis/experiments/steer.py), or None: no steering box
        self.steer = steer
        self.n_layer = n_layer

    def routes(self, batcher) -> list[Route]:
        async def page(request: Request) -> HTMLResponse:
            q = request.query_params
            text = q.get("text", DEFAULT_TEXT)[:MAX_CHARS] or DEFAULT_TEXT
            toward, away = q.get("toward", "")[:200], q.get("away", "")[:200]
            fields = {"layer": q.get("layer", str(self.n_layer // 2)), "scale": q.get("scale", "4")}
            error, status, note = "", 200, ""
            try:
                asked = self._steering(toward, away, fields) if (toward or away) and self.steer else None
                html, note = await asyncio.wrap_future(batcher.call(lambda: self._draw(text, asked)))
            except Busy as e:
                return HTMLResponse(
                    f"<p>the server is busy ({escape(str(e))}); reload in a moment</p>",
                    status_code=503,
                    headers={"Retry-After": "1"},
                )
            except TfcliError as e:
                error, status = f'<span id="live-error" role="alert">{escape(str(e))}</span>', 400
                html, _ = await asyncio.wrap_future(batcher.call(lambda: self._draw(DEFAULT_TEXT, None)))
            return HTMLResponse(
                html.replace("<header>", "<header>" + self._form(text, toward, away, fields, note, error), 1),
                status_code=status,
            )

        return [Route("/", page, methods=["GET"])]

    def _steering(self, toward: str, away: str, fields: dict) -> tuple:
        """The form's steering fields, checked: -> (toward, away, layer, scale)."""
        if not (toward and away):
            raise UsageError("steering needs both texts: the one to steer toward and the one to steer away from")
        try:
            layer, scale = int(fields["layer"]), float(fields["scale"])
        except ValueError:
            raise UsageError(
                "the block must be a whole number and the strength a number, "
                f"not {fields['layer']!r} and {fields['scale']!r}"
            ) from None
        if not math.isfinite(scale) or abs(scale) > MAX_SCALE:
            raise UsageError(f"the strength must be between -{MAX_SCALE:g} and {MAX_SCALE:g}, not {fields['scale']}")
        return toward, away, layer, scale

    def _draw(self, text: str, asked: tuple | None) -> tuple[str, str]:
        """On the engine thread: the page for `text`, steered as asked -> (html, a line saying how)."""
        if asked is None:
            return self.render(text, None), ""
        s = self.steer(*asked)
        note = (
            f'<p id="live-steered">steered: {s.scale:g} &times; v added after block {s.layer}, |v| = {s.norm:.3g} '
            f"(toward &ldquo;{escape(asked[0])}&rdquo;, away from &ldquo;{escape(asked[1])}&rdquo;)</p>"
        )
        return self.render(text, s.hooks()), note

    def _form(self, text: str, toward: str, away: str, fields: dict, note: str, error: str) -> str:
        try:
            scale = min(MAX_SCALE, max(-MAX_SCALE, float(fields["scale"])))
            scale = scale if math.isfinite(scale) else 4.0
        except ValueError:
            scale = 4.0
        box = (
            STEER_BOX.format(
                toward=escape(toward),
                away=escape(away),
                last=self.n_layer - 1,
                layer=escape(fields["layer"]),
                scale=scale,
                cap=MAX_SCALE,
                steered=note,
                open=" open" if toward or away else "",
            )
            if self.steer
            else ""
        )
        return FORM.format(text=escape(text), max=MAX_CHARS, steer_box=box, error=error)
