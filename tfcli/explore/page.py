"""The page `tfcli explore` writes (and the Python API shows inline, tfcli.explore): its data from
one pass, filled into the HTML template, stylesheet and script of this folder. No terminal library:
a notebook showing the page never imports the command line's."""

from __future__ import annotations


def page_tokens(lm, text: str, seen=None) -> list[int]:
    """The tokens of `text` the page shows, or a PromptError if it has none or more than a page holds.
    `seen(ids)` is called with them first (explore warns about unknown characters there)."""
    from tfcli.analysis import explore as ex
    from tfcli.engine.errors import PromptError

    cfg = lm.config
    ids = lm.tokenizer.prompt(text)  # what the model sees, a BOS included where the tokenizer adds one
    if seen is not None:
        seen(ids)
    if not ids:
        raise PromptError("the text encodes to no tokens", "give some text to run through the model")
    limit = ex.token_limit(cfg)
    if len(ids) > limit:
        if limit == cfg.n_ctx:
            why = f"the text is {len(ids)} tokens but {lm.name}'s context is {limit}"
        elif limit == ex.MAX_TOKENS:
            why = f"the text is {len(ids)} tokens; a page holds at most {limit}"
        else:
            why = (
                f"the text is {len(ids)} tokens; a page for {lm.name} holds at most {limit}, "
                f"as it stores {cfg.n_layer} x {cfg.n_head} heads of attention for every pair of tokens"
            )
        raise PromptError(why, "shorten the text")
    return ids


def page_html(lm, text: str, ids: list[int], lang: str, hooks=None) -> str:
    """The whole page for `ids` (the tokens of `text`) run through the loaded model `lm`
    (`hooks`: an experiment's, such as the live page's steering)."""
    from tfcli.analysis import explore as ex
    from tfcli.draw.labels import token_labels, visible
    from tfcli.engine.fast import FAST
    from tfcli.engine.sampling import SamplingParams

    cfg = lm.config
    run = ex.explore(lm.model, ids, hooks=hooks, run=FAST)
    arrays = ex.packed(run)
    tok = lm.tokenizer
    shown = set(run.next_ids.ravel().tolist()) | set(run.lens_ids.ravel().tolist())
    vocab = {str(i): _vocab_label(tok, i, visible) for i in sorted(shown)}
    defaults = SamplingParams.merged(lm.generation)
    data = {
        "lang": lang,
        "model": lm.name,
        "text": text,
        "tokens": [{"id": int(i), "label": s} for i, s in zip(ids, token_labels(tok, ids))],
        "shape": ex.shapes(cfg),
        "params": ex.parameter_totals(cfg),
        "kv_groups": ex.kv_groups(cfg),
        "limits": {"tokens": ex.token_limit(cfg), "lens_top": ex.LENS_TOP,
                   "next_top": int(run.next_ids.shape[1]), "quant": ex.QUANT},
        "sampling": {"temperature": defaults.temperature, "top_k": defaults.top_k, "top_p": defaults.top_p,
                     "min_p": defaults.min_p},
        "vocab": vocab,
        "arrays": {name: _encoded(a) for name, a in arrays.items()},
    }
    return _fill(lang, f"{lm.name} · tfcli explore", data)


def _vocab_label(tok, token_id: int, visible) -> str:
    """One vocabulary entry as the page shows it: its text made visible, or its piece when it is
    part of a character (a lone UTF-8 byte of byte-level BPE decodes to U+FFFD)."""
    text = tok.decode([token_id])
    if text and "\ufffd" not in text:
        return visible(text)
    return f"<{tok.piece(token_id)}>"


def _encoded(a) -> dict:
    import base64

    return {"dtype": a.dtype.str, "shape": list(a.shape), "b64": base64.b64encode(a.tobytes()).decode("ascii")}


def _fill(lang: str, title: str, data: dict) -> str:
    """The page template with its stylesheet, script and data put inline, each placeholder replaced
    once, in one pass over the template: a value put in is never searched for placeholders (a model
    folder named {{script}} stays those characters in the title)."""
    import re
    from importlib.resources import files

    from tfcli.draw import escape

    here = files("tfcli.explore")
    read = lambda name: here.joinpath(name).read_text(encoding="utf-8")
    values = {
        "lang": "zh-Hans" if lang == "zh" else "en",
        "title": escape.html(title),
        "style": read("page.css"),
        # One script: page.js last, as its main() draws the page once everything before it is defined.
        "script": "".join(read(name) for name in ("strings.js", "sampler.js", "attention.js", "page.js")),
        "data": escape.json_in_html(data),  # inside <script>: '</script>' cannot end it
    }
    return re.sub(r"\{\{(\w+)\}\}", lambda m: values.get(m.group(1), m.group(0)), read("page.html"))
