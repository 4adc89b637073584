"""tfcli embed: a model's own token vectors as a space: neighbours, analogies, similarities, directions;
and a whole text's embedding (`text`), as the server's /v1/embeddings gives it."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Annotated, Optional

import typer

from . import options
from .console import warn


class Action(str, Enum):
    neighbors = "neighbors"
    analogy = "analogy"
    similarity = "similarity"
    direction = "direction"
    text = "text"


ARITY = {Action.neighbors: (1, 1), Action.analogy: (3, 3), Action.similarity: (2, 2), Action.direction: (3, None),
         Action.text: (1, None)}
USAGE = {
    Action.neighbors: "tfcli embed neighbors WORD",
    Action.analogy: "tfcli embed analogy king man woman (king - man + woman)",
    Action.similarity: "tfcli embed similarity A B",
    Action.direction: "tfcli embed direction he she WORD...",
    Action.text: "tfcli embed text \"a sentence\" [\"another\"...]",
}



Top = options.top_option("How many nearest tokens to show.")


def embed(
    action: Annotated[Action, typer.Argument(
        help="neighbors WORD | analogy A B C (A - B + C) | similarity A B | direction PLUS MINUS WORD... "
             "| text TEXT... (a whole text's embedding)", show_default=False)],
    words: Annotated[list[str], typer.Argument(
        help="The words (with text: the texts; - reads one from stdin).", show_default=False)],
    model: options.Model = None,
    k: Top = 10,
    expect: Annotated[Optional[str], typer.Option(
        "--expect", help="analogy: the answer you expect; its rank among all tokens is shown.",
        show_default=False)] = None,
    layer: Annotated[Optional[int], typer.Option(
        "--resid", "-r", "--layer", "-l",
        help="Use the word's residual stream at residual index I instead of its embedding row: 0 = the embeddings, "
             "I = before block I (after block I-1), negative from the end (-1 = after the last block); --layer is its "
             "older name; the word alone, after the model's start-of-text token. Neighbours are still looked up "
             "among the embedding rows.",
        show_default=False)] = None,
    dimensions: Annotated[Optional[int], typer.Option(
        "--dimensions", help="text: keep the first N values of each embedding (then scaled to length 1 again), as the "
                             "API's dimensions does.", show_default=False)] = None,
    lang: options.LangOption = None,
    as_json: options.Json = False,
) -> None:
    """The model's own token vectors (the rows of its embedding matrix) as a space of directions.

    Cosines compare directions only (every vector is scaled to length 1 first, as word2vec does).
    A word is looked up as it appears inside a sentence (' king', with its space), or as written
    when that takes fewer tokens; a word the tokenizer splits is the mean of its tokens' vectors,
    and the output says so.

    Examples:

      tfcli embed neighbors king -m smollm2

      tfcli embed analogy king man woman --expect queen -m smollm2

      tfcli embed similarity cat dog -m smollm2 --resid 10

      tfcli embed direction he she doctor nurse engineer -m smollm2

      tfcli embed neighbors 天 -m tang --lang zh

      tfcli embed text "The cat sat on the mat." "A kitten rests on a rug." -m smollm2

    With text, each text's embedding is the model's last hidden state after its final norm,
    averaged over the text's tokens (the last token for models whose pooling config says so) and
    scaled to length 1: what `tfcli serve`'s /v1/embeddings returns. Several texts: their cosines.
    """
    from tfcli.engine.errors import UsageError


    zh = options.chinese(lang)
    lo, hi = ARITY[action]
    if len(words) < lo or (hi is not None and len(words) > hi):
        want = f"{lo}" if lo == hi else f"at least {lo}"
        raise UsageError(f"{action.value} takes {want} word(s), not {len(words)}", f"usage: {USAGE[action]}")
    options.check_top(k)
    if expect is not None and action is not Action.analogy:
        raise UsageError("--expect goes with analogy")
    if action is not Action.text and dimensions is not None:
        raise UsageError("--dimensions goes with text")
    from .inputs import load

    if action is Action.text:
        return _text(words, model, layer, dimensions, as_json, zh)
    lm = load(model)
    n = lm.config.n_layer + 1  # residual indices: the embeddings, then after each block
    if layer is not None and not -n <= layer < n:
        raise UsageError(f"--resid {layer} is not a residual index of {lm.name}: 0 (the embeddings) to "
                         f"{n - 1} (-1 = the last)")
    space = Space(lm, None if layer is None else layer % n)
    looked = [space.word(w) for w in words]
    for w in looked:
        if w.split:
            more = f" and {len(w.pieces) - 8:,} more" if len(w.pieces) > 8 else ""
            pieces = " ".join(repr(p) for p in w.pieces[:8]) + more
            given = repr(w.given) if len(w.given) <= 60 else repr(w.given[:50]) + f"... ({len(w.given):,} characters)"
            warn(f"{given} is split into {len(w.ids):,} tokens ({pieces}): its vector is the mean of theirs")
    from .views import embed as view

    if action is Action.neighbors:
        report = neighbors_report(space, looked[0], k)
    elif action is Action.analogy:
        report = analogy_report(space, looked, k, space.word(expect) if expect is not None else None)
    elif action is Action.similarity:
        report = similarity_report(space, looked)
    else:
        report = direction_report(space, looked)
    if as_json:
        from .json import emit

        emit(report)  # the one float policy of every --json (cli/json.py)
    else:
        getattr(view, action.value)(report, zh)


def _text(words: list[str], model, layer: int | None, dimensions: int | None, as_json: bool, zh: bool) -> None:
    """tfcli embed text: each text's embedding, as /v1/embeddings gives it."""
    from tfcli.engine.errors import UsageError

    from .inputs import load

    if layer is not None:
        raise UsageError("--resid does not go with text",
                         "a text's embedding is the last hidden state, after the final norm")
    texts = [options.read_text(w, "the text", "give some text to embed") for w in words]
    report = text_report(load(model), texts, dimensions)
    if as_json:
        from .json import emit

        emit(report)
    else:
        from .views import embed as view

        view.text(report, zh)


# --- the reports: one dict each, printed as JSON or drawn -------------------------------------


def text_report(lm, texts: list[str], dimensions: int | None) -> dict:
    """Each text's embedding (engine/embeddings.py) and, for two or more, their cosines."""
    import numpy as np

    from tfcli.engine.embeddings import embedding, pooling_of
    from tfcli.engine.errors import UsageError

    if dimensions is not None and not 1 <= dimensions <= lm.config.d_model:
        raise UsageError(f"--dimensions must be between 1 and {lm.config.d_model} (the width of "
                         f"{lm.name}), not {dimensions}")
    pooling = pooling_of(lm.path if lm.path.is_dir() else lm.path.parent)
    ids = [lm.tokenizer.prompt(t) for t in texts]
    from tfcli.engine.fast import FAST

    vectors = [embedding(lm.model, i, pooling, dimensions, FAST) for i in ids]  # [d] each, length 1
    rows = np.stack(vectors)  # [N, d]
    cosines = (rows.astype(np.float64) @ rows.T.astype(np.float64)).tolist()  # [N, N]: unit vectors, so dot = cosine
    return {
        "model": lm.name,
        "pooling": pooling,
        "dimensions": int(rows.shape[1]),
        "texts": [{"text": t, "tokens": len(i), "embedding": [float(x) for x in v]}
                  for t, i, v in zip(texts, ids, vectors)],
        "cosines": cosines if len(texts) > 1 else None,
    }


def _query(space: "Space", words: list["Word"]) -> dict:
    return {"words": [w.as_json() for w in words], "resid": space.layer, "layer": space.layer,
            "space": space.describe()}


def _neighbor_rows(space: "Space", found) -> list[dict]:
    from tfcli.analysis.embedding import angle_degrees

    from .views.inside import token_str

    tok = space.lm.tokenizer
    return [
        {"token": tok.token_text(int(i)), "id": int(i), "cosine": c, "angle": float(angle_degrees(c)),
         "shown": token_str(tok, int(i))}
        for i, c in zip(found.ids, found.cosines)
    ]


def _baseline(space: "Space", value: float | None = None) -> dict | None:
    """Cosines of random pairs of token rows (fixed seed), and where `value` falls among them."""
    if space.layer is not None:
        return None
    from tfcli.analysis.embedding import pair_cosines

    c = pair_cosines(space.units, 2000, seed=0)
    out = {"mean": float(c.mean()), "std": float(c.std()), "pairs": int(c.size)}
    if value is not None:
        out["share_below"] = float((c < value).mean())
    return out


def neighbors_report(space: "Space", w: "Word", k: int) -> dict:
    from tfcli.analysis.embedding import nearest

    found = nearest(space.units, space.vector(w), k, exclude=w.ids)
    return {"model": space.name, "query": _query(space, [w]), "neighbors": _neighbor_rows(space, found),
            "baseline": _baseline(space)}


def analogy_report(space: "Space", words: list["Word"], k: int, expected: "Word | None") -> dict:
    from tfcli.analysis.embedding import analogy, cosines_to, nearest, rank

    a, b, c = (space.vector(w) for w in words)
    v = analogy(a, b, c)  # [D]
    inputs = {i for w in words for i in w.ids}  # word2vec's rule: the inputs are not answers
    report = {
        "model": space.name,
        "query": _query(space, words) | {"expression": f"{words[0].given} - {words[1].given} + {words[2].given}"},
        "neighbors": _neighbor_rows(space, nearest(space.units, v, k, exclude=inputs)),
    }
    if expected is not None:
        report["expected"] = expected.as_json()
        if expected.split:
            report["expected_rank"] = None
            report["expected_note"] = "split into several tokens, so it is not one row that could be a neighbour"
        else:
            i = expected.ids[0]
            report["expected_rank"] = rank(space.units, v, i, exclude=inputs)
            report["expected_cosine"] = cosines_to(space.units[i : i + 1], v)[0]  # float32
            if report["expected_rank"] is None:
                report["expected_note"] = "it is one of the analogy's own words, which are left out"
    return report


def similarity_report(space: "Space", words: list["Word"]) -> dict:
    from tfcli.analysis.embedding import angle_degrees, cosine

    import numpy as np

    # of float32 vectors: --json prints its float32 digits
    c = np.float32(cosine(space.vector(words[0]), space.vector(words[1])))
    return {"model": space.name, "query": _query(space, words), "cosine": c, "angle": float(angle_degrees(c)),
            "baseline": _baseline(space, c)}


def direction_report(space: "Space", words: list["Word"]) -> dict:
    import numpy as np

    from tfcli.analysis.embedding import cosine, direction_projections

    vecs = [space.vector(w) for w in words]
    plus, minus = vecs[0], vecs[1]
    proj = direction_projections(plus, minus, np.stack(vecs))  # [N]
    rows = [
        {"word": w.given, "projection": np.float32(p), "cosine_plus": np.float32(cosine(v, plus)),
         "cosine_minus": np.float32(cosine(v, minus)), "split": w.split}
        for w, v, p in zip(words, vecs, proj)
    ]
    return {"model": space.name, "query": _query(space, words) | {"plus": words[0].given, "minus": words[1].given},
            "projections": rows}


@dataclass(frozen=True)
class Word:
    given: str  # as typed
    form: str  # the text that was tokenized (' king' or 'king')
    ids: tuple[int, ...]
    pieces: tuple[str, ...]

    @property
    def split(self) -> bool:
        return len(self.ids) > 1

    def as_json(self) -> dict:
        return {"word": self.given, "form": self.form, "split": self.split,
                "tokens": [{"id": i, "text": p} for i, p in zip(self.ids, self.pieces)]}


class Space:
    """The vectors a command compares: the embedding rows, or the states at --resid I."""

    def __init__(self, lm, layer: int | None):
        from tfcli.analysis.embedding import unit_rows

        self.lm, self.layer = lm, layer
        self.name = lm.name
        self.rows = lm.model.token_embedding[: lm.config.vocab_size]  # [V, D]
        self.units = unit_rows(self.rows)  # [V, D], the candidates of every neighbour search
        self.start = _start_token(lm)

    def word(self, given: str) -> Word:
        """A word as the model sees it: inside a sentence (' king'), or as typed when that takes
        fewer tokens; refused with one line when the vocabulary cannot spell it."""
        from tfcli.engine.errors import PromptError

        from .options import read_text
        from .views.inside import token_str

        given = read_text(given, "the word", "give a word")
        tok = self.lm.tokenizer
        forms = [given] if given[:1].isspace() else [" " + given, given]
        tried = [(f, tok.encode(f)) for f in forms]
        # the vocabulary spells it
        tried = [(f, ids) for f, ids in tried if ids and tok.decode(ids).strip() == f.strip()]
        if not tried:
            raise PromptError(f"{given!r} is not in {self.name}'s vocabulary (its tokenizer cannot spell it)",
                              "try another word")
        form, ids = min(tried, key=lambda fi: len(fi[1]))  # the spaced form first on a tie (min keeps the first)
        if any(i >= self.lm.config.vocab_size for i in ids):
            raise PromptError(f"{given!r} has a token id past {self.name}'s vocabulary of {self.lm.config.vocab_size}",
                              "the tokenizer does not match the model")
        return Word(given, form, tuple(ids), tuple(token_str(tok, i) for i in ids))

    def vector(self, w: Word):
        """[D]: the mean of the word's rows, or of its states at --resid I."""
        import numpy as np

        from tfcli.analysis.embedding import word_vector

        if self.layer is None:
            return word_vector(self.rows, list(w.ids))
        from tfcli.analysis.lens import residual_stream
        from tfcli.engine.fast import FAST

        prefix = [] if self.start is None else [self.start]
        states = residual_stream(self.lm.model, prefix + list(w.ids), None, FAST)[self.layer]  # [T, D]
        return np.asarray(states[len(prefix) :], dtype=np.float32).mean(axis=0)  # [D]

    def describe(self) -> str:
        if self.layer is None:
            return "embedding rows"
        after = f"after {self.lm.tokenizer.piece(self.start)!r}" if self.start is not None else "at position 0"
        if self.layer:
            return f"residual stream at index {self.layer}, after block {self.layer - 1} (the word alone, {after})"
        return f"residual stream at index 0, the embeddings (the word alone, {after})"


def _start_token(lm) -> int | None:
    """What a text starts after: the tokenizer's own BOS where it adds one, else the end-of-text
    token that separates documents in training, else the config's BOS. Without one, the word
    would sit at position 0, whose state in many models grows into an outsized attention sink
    that makes all words look alike after the first layers."""
    tok = lm.tokenizer
    added = tok.prompt("a")[: -len(tok.encode("a")) or None]
    if added:
        return added[0]
    eot = tok.token_id("<|endoftext|>")
    if eot is not None and eot < lm.config.vocab_size:
        return eot
    return lm.config.bos_token_id


