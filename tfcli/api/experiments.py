"""The experiments of the command line as functions: each computes what its command computes (the
same analysis/ functions, the same numbers) and returns a result object (results.py) instead of
printing. None of them prints or exits; bad input raises one TfcliError."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from tfcli.engine.errors import UsageError

from .attention import Attention, Mask
from .features import FeatureCards, FeatureShow
from .params import Params
from .results import Ablation, Heads, Lens, Patching, Steering
from .model import Model


def _model(model) -> Model:
    if not isinstance(model, Model):
        raise UsageError(f"the first argument is a model from tfcli.load(), not {type(model).__name__}")
    return model


def _one_token(model: Model, token, what: str) -> int | None:
    """An answer given as one token's text (' Paris', with its space) or as an id."""
    if token is None:
        return None
    if isinstance(token, (int, np.integer)) and not isinstance(token, bool):
        if not 0 <= int(token) < model.config.vocab_size:
            raise UsageError(f"{what} {int(token)} is outside the vocabulary of {model.config.vocab_size:,}")
        return int(token)
    if not isinstance(token, str):
        raise UsageError(f"{what} is a token's text or id, not {type(token).__name__}")
    ids = model.tokenizer.encode(token)
    if len(ids) != 1:
        pieces = " ".join(repr(model.tokenizer.token_text(i)) for i in ids) or "nothing"
        raise UsageError(
            f"{what} {token!r} is {len(ids)} tokens ({pieces}); it must be one token",
            "try it with or without a leading space",
        )
    return int(ids[0])


def lens(model: Model, text, *, top: int = 5) -> Lens:
    """The logit lens (`tfcli lens`): what the model would predict at each residual index if it
    stopped there, softmax(unembed(final_norm(h))), keeping the `top` tokens. The hooks of an open
    `with model.hooks()` block apply to its pass.

    >>> import tfcli
    >>> model = tfcli.load("shakespeare")
    >>> r = tfcli.lens(model, "To be, or not to b", top=3)
    >>> r.ids.shape == (model.n_blocks + 1, 18, 3)
    True
    >>> model.tokenizer.token_text(int(r.ids[-1, -1, 0]))  # the model's own prediction: the last row
    'e'
    """
    from tfcli.analysis.lens import logit_lens, residual_stream
    from tfcli.engine.memory import check_allocation
    from tfcli.analysis.lens import lens_cost

    m = _model(model)
    if isinstance(top, bool) or not isinstance(top, int) or top < 1:
        raise UsageError(f"top must be a positive integer, not {top!r}")
    ids = m._ids(text)
    net = m._lm.model
    check_allocation(
        lens_cost(net, (m.n_blocks + 1) * len(ids), top)[0],
        f"the lens of {m.n_blocks + 1} residual indices x {len(ids):,} positions",
    )
    hidden = residual_stream(net, ids, m._hooks(), run=m._run)  # [L+1] x [T, D]
    r = logit_lens(net, hidden, k=top, run=m._run)
    return Lens(m.name, ids, r.ids, r.probs, r.entropy, m.tokenizer)


def patch(model: Model, clean, corrupt, *, site: str = "resid", answer=None, wrong=None) -> Patching:
    """Activation patching (`tfcli patch`): for every residual index and position (site "resid"),
    head ("heads") or MLP output ("mlp"), the corrupt text run again with that one activation from
    the clean run; a cell is how much of the logit difference answer - wrong comes back (1: all).
    `answer`/`wrong`: one token's text or id (default: the clean and the corrupt run's top tokens).

    >>> import tfcli
    >>> r = tfcli.patch(tfcli.load("shakespeare"), "To be, or not to b", "To go, or not to g")
    >>> r.grid.shape, round(float(r.grid[-1, -1]), 3)  # the last residual index at the last position: all of it
    ((5, 18), 1.0)
    """
    from tfcli.analysis.experiments.patch import SITES, patch as run_patch

    m = _model(model)
    if site not in SITES:
        raise UsageError(f"site must be one of {', '.join(SITES)}, not {site!r}")
    a, b = m._ids(clean), m._ids(corrupt)
    if len(a) != len(b):
        raise UsageError(
            f"the clean text is {len(a)} tokens and the corrupt one {len(b)}",
            "patching compares position by position: change words of the same token count",
        )
    r = run_patch(
        m._lm.model,
        a.tolist(),
        b.tolist(),
        site,
        _one_token(m, answer, "answer"),
        _one_token(m, wrong, "wrong"),
        run=m._run,
    )
    return Patching(m.name, site, a, b, r.answer, r.wrong, r.clean_ld, r.corrupt_ld, r.grid, m.tokenizer)


def ablate(model: Model, text, *, answer=None) -> Ablation:
    """Ablation (`tfcli ablate`): each head (its context vector zeroed) and each MLP (its output
    zeroed) taken out in turn; the change in the log-probability of `answer` after the last token
    (default: the model's top token). Negative: the answer needed that part.

    >>> import tfcli
    >>> model = tfcli.load("shakespeare")
    >>> r = tfcli.ablate(model, "To be, or not to b")
    >>> r.heads.shape == (model.n_blocks, model.config.n_head) and r.mlps.shape == (model.n_blocks,)
    True
    """
    from tfcli.analysis.experiments.ablate import ablate as run_ablate

    m = _model(model)
    ids = m._ids(text)
    r = run_ablate(m._lm.model, ids.tolist(), _one_token(m, answer, "answer"), run=m._run)
    return Ablation(m.name, ids, r.answer, r.logprob, r.heads, r.mlps, m.tokenizer)


def heads(model: Model, text, *, position: int = -1, token=None, repeat: int = 20, seed: int = 0) -> Heads:
    """What each head does (`tfcli heads`): direct logit attribution of `token` (default: the top
    prediction) at `position`, and the previous-token, first-token, induction and duplicate-token
    detectors (the last two on `repeat` random tokens repeated twice, drawn with `seed`).

    >>> import tfcli
    >>> model = tfcli.load("shakespeare")
    >>> r = tfcli.heads(model, "To be, or not to b")
    >>> bool(abs(r.total - r.logit) < 1e-3 * abs(r.logit) + 1e-3)  # the parts add up to the logit
    True
    """
    from tfcli.analysis.experiments.heads import attribute, detect

    m = _model(model)
    if isinstance(repeat, bool) or not isinstance(repeat, int) or not 2 <= repeat <= 512:
        raise UsageError(f"repeat must be from 2 to 512, not {repeat!r}")
    ids = m._ids(text)
    p = position + len(ids) if position < 0 else position
    if not 0 <= p < len(ids):
        raise UsageError(
            f"position {position} is outside the text's {len(ids)} tokens (0 to {len(ids) - 1}, or -1 for the last)"
        )
    prefix = len(m.tokenizer.prompt(""))
    if prefix + 2 * repeat > m.config.n_ctx:
        raise UsageError(
            f"repeat {repeat} needs {prefix + 2 * repeat} positions; {m.name}'s context is {m.config.n_ctx}"
        )
    net = m._lm.model
    a = attribute(net, ids, p, _one_token(m, token, "token"), run=m._run)
    d = detect(net, ids, m.tokenizer, repeat, seed, run=m._run)
    return Heads(
        m.name,
        ids,
        a.position,
        a.target,
        a.logit,
        a.embedding,
        a.heads,
        a.mlps,
        a.bias,
        a.total,
        d.previous_token,
        d.first_token,
        d.induction,
        d.duplicate_token,
        list(d.induction_tokens),
        m.tokenizer,
    )


def steer(
    model: Model,
    prompt: str,
    *,
    toward: str,
    away: str,
    block: int,
    scale: float = 4.0,
    max_new_tokens: int = 40,
    temperature: float | None = None,
    seed: int | None = None,
) -> Steering:
    """Steering (`tfcli steer`): v = the mean residual stream after `block` for `toward` minus the
    same for `away`; `scale`·v is added to that block's output at every position. Returns both
    continuations of `prompt`, plain and steered, drawn with the same seed.

    >>> import tfcli
    >>> r = tfcli.steer(tfcli.load("shakespeare"), "To be, or", toward="love", away="death", block=2, scale=6,
    ...                 max_new_tokens=12, temperature=0)
    >>> r.plain != r.steered
    True
    """
    import random

    from tfcli.analysis.experiments import steer as steering
    from tfcli.engine.generate import Generation, Session, check_max_new_tokens
    from tfcli.engine.sampling import Sampler, SamplingParams

    m = _model(model)
    check_max_new_tokens(max_new_tokens)
    ids = m._ids(prompt)
    prefix = len(m.tokenizer.prompt(""))

    def side(text: str, what: str):
        t = m._ids(text)
        if len(t) <= prefix:
            raise UsageError(f"{what} is empty", "give a word or a few for each side of the direction")
        return t.tolist(), max(1, len(t) - prefix)

    s = steering.steering_vector(m._lm.model, side(toward, "toward"), side(away, "away"), block, scale, m._run)
    seed = random.randrange(2**31) if seed is None else seed
    want = min(max_new_tokens, m.config.n_ctx - len(ids) + 1)
    if want < 1:
        raise UsageError(f"the prompt fills {m.name}'s context of {m.config.n_ctx}", "shorten it")
    runs = {}
    for name, hooks in (("plain", None), ("steered", s.hooks())):
        sampler = Sampler(SamplingParams.merged(m._lm.generation, temperature=temperature, seed=seed))
        gen = Generation(
            Session(m._lm.model, len(ids) + want, hooks=m._hooks(hooks)),
            m.tokenizer,
            ids.tolist(),
            sampler,
            max_new_tokens=want,
            eos_ids=m.config.eos_token_ids,
        )
        steps = list(gen)
        runs[name] = ("".join(st.text for st in steps) + gen.flush(), [int(st.token) for st in steps])
    return Steering(
        m.name,
        prompt,
        s.layer,
        s.scale,
        s.vector,
        runs["plain"][0],
        runs["steered"][0],
        runs["plain"][1],
        runs["steered"][1],
        seed,
        toward,
        away,
    )


def _pick(value, n: int, what: str) -> list[int]:
    if value is None:
        return list(range(n))
    picked = [value] if isinstance(value, (int, np.integer)) and not isinstance(value, bool) else list(value)
    out = []
    for v in picked:
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
            raise UsageError(f"{what} must be integers, not {v!r}")
        k = int(v) + n if v < 0 else int(v)
        if not 0 <= k < n:
            raise UsageError(f"{what} {int(v)} is out of range: the model has {what}s 0 to {n - 1}")
        out.append(k)
    return out


def attention(model: Model, text, *, block=None, head=None) -> Attention:
    """A model's attention weights over a text (`tfcli attn`): `block` and `head` an index (negative
    from the end), a list of them, or None for all. Drawn as heatmaps in Jupyter.

    >>> import tfcli
    >>> r = tfcli.attention(tfcli.load("shakespeare"), "To be, or not", block=0, head=0)
    >>> r.weights.shape, bool(np.allclose(r.weights.sum(axis=-1), 1, atol=1e-5))
    ((1, 1, 13, 13), True)
    """
    from tfcli.analysis.attention import attention_weights

    m = _model(model)
    blocks, hs = _pick(block, m.n_blocks, "block"), _pick(head, m.config.n_head, "head")
    ids = m._ids(text)
    w = attention_weights(m._lm.model, ids.tolist(), blocks, run=m._run)[:, hs]  # [nB, nH, T, T]
    return Attention(m.name, ids, blocks, hs, w, m.tokenizer, (m.n_blocks, m.config.n_head))


def mask(text: str, *, pattern: str = "causal") -> Mask:
    """An attention mask over a text's words (characters for text without spaces, as Chinese):
    `pattern` causal, sliding:W (each token sees the last W) or banded:W (`tfcli attn --show-mask`).

    >>> import tfcli
    >>> m = tfcli.mask("今天天气很好")
    >>> m.allowed.astype(int)[:3, :3].tolist()
    [[1, 0, 0], [1, 1, 0], [1, 1, 1]]
    """
    from tfcli.analysis.attention import masked_softmax, parse_pattern
    from tfcli.engine.errors import PromptError

    if not isinstance(text, str):
        raise UsageError(f"mask() takes a str, not {type(text).__name__}")
    pat = parse_pattern(pattern)
    labels = text.split() if any(c.isspace() for c in text.strip()) else [c for c in text if not c.isspace()]
    if not labels:
        raise PromptError("the text has no tokens", "give some text to draw the mask for")
    if len(labels) > 1024:
        raise PromptError(f"a mask is drawn for at most 1,024 tokens; the text has {len(labels):,}", "shorten it")
    allowed = pat.mask(len(labels))  # [T, T]
    return Mask(pat.name, labels, allowed, masked_softmax(np.zeros(allowed.shape, dtype=np.float32), allowed))


class Features:
    """A sparse autoencoder (`tfcli features train -o FOLDER`) on a model: `show` which features
    fire on each token of a text, `top` the cards of the most active ones over a text. Made by
    `tfcli.features(model, folder)`; `n`, `block`, `site` say what it reads.

    >>> import tfcli
    >>> sae = tfcli.features(tfcli.load("shakespeare"), sae_folder)  # a folder 'tfcli features train -o' wrote
    >>> sae.block, sae.site
    (2, 'resid_post')
    """

    def __init__(self, model: Model, folder: Path, f):
        self._m, self.folder, self._f = model, folder, f

    @property
    def n(self) -> int:
        return self._f.n

    @property
    def block(self) -> int:
        return self._f.block

    @property
    def site(self) -> str:
        return self._f.site

    def __repr__(self) -> str:
        return (f"<tfcli.Features {self.folder}: {self.n:,} features of {self.site} of block {self.block} "
                f"on {self._m.name}>")

    def show(self, text, *, top: int = 5) -> FeatureShow:
        """Per token of `text`, its `top` strongest features (`tfcli features show`)."""
        from tfcli.analysis.features import show

        ids = self._m._ids(text)
        rows = show(self._m._lm.model, self._f, ids.tolist(), max(1, int(top)), self._m._run)
        return FeatureShow(self._m.name, str(self.folder), self.block, self.site, ids, rows, self._m.tokenizer)

    def top(
        self,
        text: str | Path,
        *,
        n: int = 10,
        contexts: int = 5,
        features: list[int] | None = None,
        tokens: int = 50_000,
    ) -> FeatureCards:
        """Cards of the `n` most active features over `text` (a str, or a Path to a UTF-8 file), or
        of `features`: the contexts that fire each most and the tokens it pushes up and down
        (`tfcli features top`)."""
        from tfcli.analysis.feature_cards import feature_cards

        m = self._m
        if isinstance(text, Path):
            from tfcli.analysis.feature_runs import check_text, token_windows

            ids: list[int] = []
            for w in token_windows(m.tokenizer, text, 0, check_text(text), 4096):
                ids.extend(int(i) for i in w)
                if len(ids) >= tokens:
                    break
        else:
            ids = m.tokenizer.encode(text)
        if len(ids) < 2:
            raise UsageError("the text is shorter than 2 tokens", "give a longer text")
        for i in features or ():
            self._f.feature(int(i), "features")
        found = feature_cards(m._lm, self._f, ids[: max(2, tokens)], max(1, n), max(1, contexts), features, m._run)
        return FeatureCards(m.name, str(self.folder), self.block, self.site, found["tokens"], found["cards"])


def features(model: Model, folder: str | Path, *, any_model: bool = False) -> Features:
    """The SAE in `folder` on `model`, checked against it (its width, block and the model it was
    trained on, unless `any_model`).

    >>> import tfcli
    >>> sae = tfcli.features(tfcli.load("shakespeare"), sae_folder)  # a folder 'tfcli features train -o' wrote
    >>> sae.n, len(sae.show("To be").rows)
    (256, 5)
    """
    from tfcli.analysis.features import load_features
    from tfcli.engine.identity import identity_of

    m = _model(model)
    folder = Path(folder)
    return Features(m, folder, load_features(folder, m._lm.model, identity_of(m._lm), any_model))


def params(preset: str | None = None, *, model: str | Path | None = None) -> Params:
    """Where a transformer's parameters live (`tfcli params`): 3Blue1Brown's tally of the weight
    matrices beside the exact count of every tensor, FLOPs and memory per token. `preset`: a
    published shape (gpt3, gpt2, smollm2-135m ...; default gpt3); `model`: a model name or folder
    whose config.json gives the shape instead (only config.json is read).

    >>> import tfcli
    >>> tfcli.params("gpt3").tally
    175181291520
    """
    from tfcli.analysis.params import presets
    from tfcli.analysis.params import report as rep
    from tfcli.analysis.params.shape import ShapeError

    if model is not None:
        from tfcli.analysis.params.shape import check
        from tfcli.engine.families import load_config
        from tfcli.store.registry import as_model_arg, resolve

        folder = resolve(as_model_arg(model) if isinstance(model, Path) else str(model))
        subject = rep.Subject(
            folder.name, folder.name, str(folder / "config.json"), check(load_config(folder / "config.json"))
        )
    else:
        try:
            subject = rep.of_preset(presets.get(preset or presets.DEFAULT))
        except ShapeError as e:
            raise UsageError(f"preset: {e.message}", e.hint) from None
    return Params(rep.build(subject))
