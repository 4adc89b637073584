"""tfcli neurons: the MLP of one block as F questions asked of every token's vector, and the answer
one neuron adds."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from . import options


Block = options.block_option(
    int, "The block whose MLP to look at: 0 to L-1, negative from the end (-1 = the last).", show_default=False
)
Top = options.top_option("How many neurons per token (or tokens per list with --neuron).")


def neurons(
    layer: Block,
    text: Annotated[
        Optional[str], typer.Argument(help="The text to run through the model ('-' reads stdin).", show_default=False)
    ] = None,
    file: options.TextFile = None,
    model: options.Model = None,
    neuron: Annotated[
        Optional[int],
        typer.Option(
            "--neuron",
            "-n",
            help="One neuron: which tokens of the text make it fire, and which tokens its output pushes up and down.",
            show_default=False,
        ),
    ] = None,
    k: Top = 5,
    lang: options.LangOption = None,
    as_json: options.Json = False,
) -> None:
    """The MLP as questions: which of a block's neurons each token's vector turns on.

    A block's MLP asks every token's vector F questions at once (F = 4 x D for GPT-2): each neuron
    is one row of W_up, its activation (after GELU, or for SwiGLU silu(gate) * up) the answer.
    The answers, weighted by the rows of W_down, are added to the vector. --neuron N shows what
    one neuron's row of W_down adds: the tokens it pushes up, read through the final norm and the
    unembedding (its direct effect on the prediction).

    Examples:

      tfcli neurons "The Eiffel Tower is in Paris" --block 10 -m smollm2

      tfcli neurons "The Eiffel Tower is in Paris" --block 10 --neuron 123 -m smollm2

      tfcli neurons -m tang "今天天气很好" --block 2 --lang zh

      tfcli neurons --file notes.txt --block 0
    """
    from tfcli.engine.errors import UsageError

    from .inputs import load, text_ids, text_or_file

    zh = options.chinese(lang)
    options.check_top(k)
    text = text_or_file(text, file, "neurons")
    lm = load(model)
    cfg = lm.config
    index = layer + cfg.n_layer if layer < 0 else layer
    if not 0 <= index < cfg.n_layer:
        raise UsageError(
            f"--block {layer} is not a block of {lm.name}: it has {cfg.n_layer} blocks, 0 to "
            f"{cfg.n_layer - 1} (-1 = the last)"
        )
    if neuron is not None and not 0 <= neuron < cfg.d_ff:
        raise UsageError(
            f"--neuron {neuron} is not a neuron of {lm.name}'s MLP: it has {cfg.d_ff}, 0 to {cfg.d_ff - 1}"
        )
    ids = text_ids(lm, text, read=True)
    from .progress import LONG_SECONDS, Waiting

    what = (
        f"第 {index} 块的神经元：{len(ids):,} 个词元的前向"
        if zh
        else f"the neurons of block {index}: a pass over {len(ids):,} tokens"
    )
    with Waiting(what, after=LONG_SECONDS):  # a long text's pass: a spinner at a terminal after 2 s
        report = _report(lm, ids, index, neuron, k)
    if as_json:
        from .json import emit

        emit(report)  # the one float policy of every --json (cli/json.py)
        return
    from .views import neurons as view
    from .views.attn import token_labels

    tok = lm.tokenizer
    labels = token_labels(tok, ids)
    names = {
        int(i): _shown(tok, int(i))
        for key in ("pushes_up", "pushes_down")
        for i in (r["id"] for r in report.get(key, []))
    }
    if neuron is None:
        view.table(report, labels, zh)
    else:
        view.one(report, labels, names, zh)


def _report(lm, ids: list[int], index: int, neuron: int | None, k: int) -> dict:
    """What --json prints and the views draw: each token's top k neurons, or one neuron's
    activation on every token and the tokens its output pushes up and down."""
    from tfcli.analysis import neurons as nn
    from tfcli.engine.fast import FAST

    cfg, tok = lm.config, lm.tokenizer
    acts = nn.activations(lm.model, ids, index, FAST)  # [T, F]
    head = {"model": lm.name, "block": index, "d_ff": cfg.d_ff, "d_model": cfg.d_model, "mlp": cfg.mlp}
    if neuron is None:
        top_ids, top_vals = nn.top_neurons(acts, k)  # [T, k]
        report = head | {
            "tokens": [
                {
                    "position": t,
                    "id": int(i),
                    "text": tok.token_text(int(i)),
                    "neurons": [{"neuron": int(n), "activation": float(v)} for n, v in zip(top_ids[t], top_vals[t])],
                }
                for t, i in enumerate(ids)
            ],
            "most_common": [{"neuron": n, "tokens": c} for n, c in nn.most_common(top_ids, 5)],
        }
    else:
        logits = nn.direct_logits(lm.model, nn.output_direction(lm.model, index, neuron), FAST)  # [V]
        up, down = _ends(logits[: cfg.vocab_size], k)
        report = head | {
            "neuron": neuron,
            "activations": [
                {"position": t, "id": int(i), "text": tok.token_text(int(i)), "activation": float(acts[t, neuron])}
                for t, i in enumerate(ids)
            ],
            "pushes_up": [{"token": tok.token_text(int(i)), "id": int(i), "logit": float(logits[i])} for i in up],
            "pushes_down": [{"token": tok.token_text(int(i)), "id": int(i), "logit": float(logits[i])} for i in down],
        }
    return report


def _ends(logits, k: int):
    """The ids of the k largest and the k smallest logits, most extreme first."""
    import numpy as np

    order = np.lexsort((np.arange(len(logits)), -logits))
    return order[:k].tolist(), order[::-1][:k].tolist()


def _shown(tok, i: int) -> str:
    from .views.inside import token_str

    return token_str(tok, i)
