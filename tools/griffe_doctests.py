"""A griffe extension for the docs site: doctest examples in docstrings become fenced `pycon` code.

tfcli's docstrings show their examples as doctests (`>>> ...` and the expected output, a blank
line after), which Python's doctest runs but Markdown reads as prose when it is not indented: `d["grid"][0]` became a
reference link that did not resolve. Each run of lines from a `>>>` to the next blank line is
fenced, so it is drawn as a console session and nothing in it is read as Markdown.
"""

from __future__ import annotations

from griffe import Extension, Object


def fence_doctests(text: str) -> str:
    out, inside, fenced = [], False, False
    for line in text.split("\n"):
        stripped = line.lstrip()
        if stripped.startswith(("```", "~~~")):
            fenced = not fenced
        if not fenced and not inside and stripped.startswith(">>>") and len(line) - len(stripped) < 4:  # 4: already code
            indent = line[: len(line) - len(stripped)]
            out.append(indent + "```pycon")
            inside = True
        elif inside and not stripped:
            out.append(indent + "```")
            inside = False
        out.append(line)
    if inside:
        out.append(indent + "```")
    return "\n".join(out)


class FenceDoctests(Extension):
    def on_object(self, *, obj: Object, **kwargs) -> None:
        if obj.docstring is not None:
            obj.docstring.value = fence_doctests(obj.docstring.value)
