"""tfcli params: where a transformer's parameters live, what one token costs, and the memory it takes.

Arguments -> a Subject (the shape to count) -> the report dict (tfcli/analysis/params/report.py)
-> JSON, or the tables of tfcli/cli/views/params.py. The numbers come from the shape alone (pure
Python), so --preset and the shape flags run without NumPy. Only -m and --from read files; they
import the engine's config and safetensors header readers inside the functions that need them.
"""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Optional

import typer

from tfcli.engine.config import MLPS

from . import options
from .console import note, warn
from tfcli.draw.escape import json_text

if TYPE_CHECKING:
    from tfcli.analysis.params.report import Subject


# The MLP kinds a family may have (engine/config.py's table): gelu, swiglu, geglu.
Mlp = Enum("Mlp", {key: key for key in MLPS}, type=str)
_MLP_HELP = "; ".join(f"{key}: {kind.matrices} matrices ({'gate, up, down' if kind.matrices == 3 else 'up, down'})"
                      for key, kind in MLPS.items())


_SIZE = {"show_default": False, "rich_help_panel": "Shape"}


Lang = options.LangOption


def params(
    preset: Annotated[
        Optional[str],
        typer.Option("--preset", "-p",
                     help="A published shape: gpt3 (175B), gpt3-small ... gpt3-13b, gpt2 ... gpt2-xl, smollm2-135m, "
                          "qwen3-0.6b, llama-3.2-1b, gemma-3-270m, phi-4-mini. Default: gpt3.",
                     show_default=False),
    ] = None,
    model: Annotated[
        Optional[str],
        typer.Option("--model", "-m",
                     help="A model name or folder: take the shape from its config.json (wins over --preset).",
                     show_default=False),
    ] = None,
    from_value: Annotated[
        Optional[str],
        typer.Option(
            "--from",
            help="A .safetensors file, a model folder or a model name (as -m takes it): count the tensors it stores "
                 "and compare them with the count from the shape.",
            show_default=False,
        ),
    ] = None,
    layers: Annotated[Optional[int], typer.Option("--layers", help="L: transformer blocks.", **_SIZE)] = None,
    d_model: Annotated[Optional[int], typer.Option(
        "--d-model", help="D: width of the residual stream.", **_SIZE)] = None,
    heads: Annotated[Optional[int], typer.Option("--heads", help="H: query heads.", **_SIZE)] = None,
    head_dim: Annotated[Optional[int], typer.Option(
        "--head-dim", help="Dh: size of one head (default: d_model / heads).", **_SIZE)] = None,
    kv_heads: Annotated[Optional[int], typer.Option(
        "--kv-heads", help="Hkv: key/value heads; fewer than --heads is grouped-query attention.", **_SIZE)] = None,
    d_ff: Annotated[Optional[int], typer.Option(
        "--d-ff", help="F: MLP width (default: 4 x d_model for gelu; for swiglu LLaMA's 8/3 x d_model, "
                       "rounded up to 256).", **_SIZE)] = None,
    vocab: Annotated[Optional[int], typer.Option("--vocab", help="V: vocabulary size.", **_SIZE)] = None,
    context: Annotated[Optional[int], typer.Option("--context", help="T: context length.", **_SIZE)] = None,
    tied: Annotated[Optional[bool], typer.Option(
        "--tied/--untied", help="Whether the unembedding is the embedding matrix.", **_SIZE)] = None,
    bias: Annotated[Optional[bool], typer.Option(
        "--bias/--no-bias", help="Biases on the attention and MLP projections.", **_SIZE)] = None,
    mlp: Annotated[Optional[Mlp], typer.Option("--mlp", help=f"The MLP kind. {_MLP_HELP}.", **_SIZE)] = None,
    list_presets: Annotated[bool, typer.Option("--list-presets", help="List the presets and exit.")] = False,
    lang: Lang = None,
    as_json: options.Json = False,
) -> None:
    """Count a GPT's parameters two ways, and what a token costs in FLOPs and memory.

    3Blue1Brown's tally (weight matrices only) is shown step by step beside the
    exact count of every tensor a checkpoint stores, with why the two differ.

    The shape comes from --preset, -m, the config.json beside --from, or the
    default gpt3. The shape flags change it; sizes you do not give follow from
    those you do (head_dim = d_model / heads, d_ff = 4 x d_model). --from
    (a weight file, a model folder or a model name) compares the count with the
    tensors actually stored, and exits with 1 if they differ.

    Examples:

      tfcli params --preset gpt3

      tfcli params --preset gpt2 --untied

      tfcli params --preset gpt3 --layers 48 --context 8192

      tfcli params --from path/to/model --json

      tfcli params --from smollm2

      tfcli params --preset smollm2-135m --lang zh
    """
    from tfcli.analysis.params import report as R

    zh = options.chinese(lang)
    if list_presets:
        rows = R.presets_list()
        if as_json:
            print(json_text({"presets": rows}))
        else:
            from .views.params_from import render_presets

            render_presets(rows, zh)
        return
    flags = {"layers": layers, "d_model": d_model, "heads": heads, "head_dim": head_dim, "kv_heads": kv_heads}
    flags |= {"d_ff": d_ff, "vocab": vocab, "context": context, "tied": tied, "bias": bias,
              "mlp": mlp.value if mlp else None}
    # before the shape: a bad path is the first thing to say
    weights = _weights(from_value) if from_value is not None else None
    subject = _subject(preset, model, from_value, weights, flags)
    report = R.build(subject)
    if weights is not None:
        shown = str(Path(from_value)) if _is_path(from_value) else str(weights)  # as typed, or the folder a name found
        report["from"] = R.build_from(subject, shown, *_read_shapes(weights))
    if as_json:
        from .json import emit

        model_name = Path(from_value).name if from_value is not None and _is_path(from_value) else from_value or model
        emit({"model": model_name} | report)  # None for a preset or a shape from flags
    else:
        from .views.params import render

        render(report, zh)
    agree = report.get("from", {}).get("agree", True)
    if not agree:
        bad = report["from"]
        warn(
            f"the tensors in {bad['path']} differ from the count for this shape: "
            f"{len(bad['mismatched'])} categor{'y' if len(bad['mismatched']) == 1 else 'ies'} differ, "
            f"{len(bad['uncategorised'])} tensor(s) not categorised"
        )
        raise typer.Exit(1)


def _subject(preset: str | None, model: str | None, from_value: str | None, weights: Path | None,
             flags: dict) -> Subject:
    """The shape to count: flags applied to -m's config.json, else --preset, else the config.json
    beside --from, else gpt3."""
    from tfcli.analysis.params import presets
    from tfcli.analysis.params.report import Subject, changed_by, of_preset

    chosen = presets.get(preset) if preset is not None else None
    if model is not None:
        folder = options.model_folder(model)
        if chosen is not None:
            note(f"-m {model}: its config.json replaces --preset {chosen.name}")
        base = Subject(folder.name, folder.name, f"{folder / 'config.json'}", _config(folder / "config.json"))
    elif chosen is not None:
        base = of_preset(chosen)
    elif weights is not None:
        config = (weights if weights.is_dir() else weights.parent) / "config.json"
        if not config.exists():
            from tfcli.engine.errors import ConfigError

            raise ConfigError(f"no config.json beside {Path(from_value)} to say what shape to expect",
                              "give the shape with --preset or -m")
        base = Subject(config.parent.name, config.parent.name, str(config), _config(config))
    else:  # the default: flags then describe a shape of their own, not a changed GPT-3
        return changed_by(of_preset(presets.get(presets.DEFAULT)), flags, named=False)
    return changed_by(base, flags)


def _config(path: Path):
    from tfcli.analysis.params.shape import check
    from tfcli.engine.families import load_config

    return check(load_config(path))


def _is_path(value: str) -> bool:
    """--from's value names a path, not a model: it looks like one, names a weight file, or is a file."""
    from tfcli.store.registry import looks_like_path

    return looks_like_path(value) or value.endswith(".safetensors") or Path(value).is_file()


def _is_gguf(path: Path) -> bool:
    return path.suffix.lower() == ".gguf" and path.is_file()


def _weights(value: str) -> Path:
    """--from VALUE: a .safetensors file or a model folder by its path, or a model by its name, as -m
    takes it (shipped, cached, or pulled on first use). A name is never a folder's path (see
    tfcli/store/registry.py), but a model is never a file, so a bare file name is taken as the file."""
    from tfcli.engine.errors import CheckpointError

    if not _is_path(value):
        return options.model_folder(value)
    try:
        path = Path(value).expanduser()
    except RuntimeError:  # ~someone, and there is no such user
        path = Path(value)
    if not path.exists():
        raise CheckpointError(
            f"{value} does not exist",
            "no such file or folder; give a .safetensors file, a model folder, or a model name: see 'tfcli models'",
        )
    # a GGUF: the index of it run in place
    return options.model_folder(value) if path.is_dir() or _is_gguf(path) else path


def _read_shapes(path: Path) -> tuple[dict[str, tuple[int, ...]], list[str], dict[str, int]]:
    """{tensor name: shape} of a safetensors file or a model folder (sharded or not), read from the
    headers only; the files holding them; how many tensors of each dtype."""
    if path.is_dir():
        from tfcli.engine.checkpoint import open_tensors

        t = open_tensors(path)
        shapes = {name: t.shape(name) for name in t.names}
        dtypes = [t.dtype(name) for name in t.names]
        files = [f.name for f in t.paths]
    else:
        from tfcli.engine.weightfile import read_header

        _, infos = read_header(path)
        shapes = {name: info.shape for name, info in infos.items()}
        dtypes = [info.dtype for info in infos.values()]
        files = [path.name]
    return shapes, files, {d: dtypes.count(d) for d in sorted(set(dtypes))}
