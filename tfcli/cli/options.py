"""Option aliases shared by several commands (Typer `Annotated` style)."""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import Annotated, Optional

import typer

from .lang import HELP as LANG_HELP

# How the command line names the settings the engine validates (engine/errors.FIELDS): an engine
# error says `{temperature}`, the error boundary shows `--temperature`.
FLAGS = {
    "max_new_tokens": "--max-tokens", "temperature": "--temperature", "top_k": "--top-k", "top_p": "--top-p",
    "min_p": "--min-p", "repetition_penalty": "--repetition-penalty", "repeat_last_n": "--repeat-last-n",
    "seed": "--seed", "samples": "--samples", "stop": "--stop", "window": "--window", "stride": "--stride",
    "lookup": "--lookup", "slide": "--slide", "truncate": "--truncate",
}  # fmt: skip

Model = Annotated[
    Optional[str],
    typer.Option(
        "--model",
        "-m",
        help="A model name (see 'tfcli models': shipped in weights/, or pulled) or a path to a model folder. "
             "Default: shakespeare.",
        show_default=False,
    ),
]
Seed = Annotated[Optional[int], typer.Option(
    "--seed", "-s", help="Random seed: the same seed gives the same output.", show_default=False)]
Threads = Annotated[
    Optional[int],
    typer.Option(
        "--threads",
        help="Threads for the matrix products and for the parts of a long prompt (default: the cores idle right now; "
             "busy cores stall threads).",
        show_default=False,
    ),
]



class KvType(str, Enum):
    """--kv-type: the numbers the KV cache keeps (engine/kvcache.py, KV_TYPES)."""

    f32 = "f32"
    f16 = "f16"
    q8_0 = "q8_0"


KvTypeOption = Annotated[
    Optional[KvType],
    typer.Option(
        "--kv-type",
        help="The KV cache's numbers: f16 halves its memory and what a decode step reads of it, q8_0 (8-bit "
             "blocks, as llama.cpp's; head sizes a multiple of 32) takes 34/64 of f16's, f32 keeps the "
             "textbook's. Default: f16 for a quantized (GGUF) model, as llama.cpp, f32 for a float one.",
        show_default=False,
    ),
]


def apply_kv_type(lm, kv_type: KvType | str | None):
    """--kv-type on a loaded model: the caches it makes from now on keep these numbers (None: its default)."""
    if kv_type is not None:
        from tfcli.engine.kvcache import check_kv_type

        name = kv_type.value if isinstance(kv_type, KvType) else kv_type
        check_kv_type(lm.model.config, name)  # an unknown name, a head size q8_0 cannot cut: a one-line UsageError
        lm.model.kv_type = name
    return lm


def json_option(help: str):
    """--json, with what the command's JSON holds."""
    return Annotated[bool, typer.Option("--json", help=help)]


Json = json_option("Print JSON for scripts instead of tables.")
TextFile = Annotated[Optional[Path], typer.Option(
    "--file", "-f", help="Read the text from this UTF-8 file instead of TEXT.", show_default=False)]


# The options of several commands whose help says what they draw or count: their names and types
# here, once; each command names its alias with its own words (Png = options.png_option("the grid")).
def png_option(what: str, more: str = ""):
    """--png FILE: also write `what` as a PNG image; `more` says what it needs or holds."""
    return Annotated[Optional[Path], typer.Option(
        "--png", help=f"Also write {what} as a PNG image{more}.", show_default=False, dir_okay=False)]


def svg_option(what: str):
    """--svg FILE: also write `what` as an SVG image."""
    return Annotated[Optional[Path], typer.Option(
        "--svg", help=f"Also write {what} as an SVG image.", show_default=False, dir_okay=False)]


def block_option(kind: type, help: str, **extra):
    """--block/-b (also --layer/-l): a transformer block, by number (kind int) or with 'all' (kind str)."""
    return Annotated[kind, typer.Option("--block", "-b", "--layer", "-l", help=help, **extra)]


def top_option(help: str):
    """--top/-k: how many of the best to show; check_top refuses fewer than one."""
    return Annotated[int, typer.Option("--top", "-k", help=help)]


def check_top(k: int) -> None:
    from tfcli.engine.errors import UsageError

    if k < 1:
        raise UsageError(f"--top must be at least 1, not {k}")


def check_count(flag: str, value: int | None, low: int, high: int, hint: str | None = None) -> None:
    """A count flag from low to high, refused (exit 2) before anything is made of it: a negative
    count, or one that would ask memory for a billion rows."""
    from tfcli.engine.errors import UsageError, shown_number

    if value is not None and not low <= value <= high:
        raise UsageError(f"{flag} must be between {low:,} and {high:,}, not {shown_number(value)}", hint)


SEED_MAX = (1 << 63) - 1  # seeds run from 0 to 2^63-1 everywhere in tfcli (README)


def check_seed(value: int | None, flag: str = "--seed") -> None:
    check_count(flag, value, 0, SEED_MAX, "a seed is a whole number from 0 to 2^63-1")

# The sampling knobs, shared by generate and chat. None means "not given": the model's
# generation_config.json, then llama.cpp's defaults, fill it in (SamplingParams.merged).
_SAMPLING = "Sampling"
Temperature = Annotated[
    Optional[float],
    typer.Option("--temperature", "-t", "--temp",
                 help="Divide the logits by this before softmax: 0 = greedy, <1 sharper, >1 flatter. "
                      "(default: model's, else 0.8)",
                 show_default=False, rich_help_panel=_SAMPLING),
]
TopK = Annotated[Optional[int], typer.Option(
    "--top-k", help="Keep only the k most likely tokens (0 = off). (default: model's, else 40)", show_default=False,
    rich_help_panel=_SAMPLING)]
TopP = Annotated[
    Optional[float],
    typer.Option("--top-p",
                 help="Keep the smallest set of tokens whose probability reaches p (1 = off). "
                      "(default: model's, else 0.95)",
                 show_default=False, rich_help_panel=_SAMPLING),
]
MinP = Annotated[Optional[float], typer.Option(
    "--min-p", help="Drop tokens less likely than min-p x the top token (0 = off). (default: model's, else 0.05)",
    show_default=False, rich_help_panel=_SAMPLING)]
RepetitionPenalty = Annotated[
    Optional[float],
    typer.Option("--repetition-penalty", "--repeat-penalty",
                 help="Penalise tokens seen in the last --repeat-last-n (1 = off). (default: model's, else 1)",
                 show_default=False, rich_help_panel=_SAMPLING),
]
RepeatLastN = Annotated[Optional[int], typer.Option(
    "--repeat-last-n", help="How many recent tokens the repetition penalty looks at. (default: 64)", show_default=False,
    rich_help_panel=_SAMPLING)]


def sampler(generation: dict, **flags):
    """A Sampler for the flags given (None = not given), the model's generation_config.json and the defaults."""
    from tfcli.engine.sampling import Sampler, SamplingParams

    return Sampler(SamplingParams.merged(generation, **flags))


# A prompt on stdin is read up to this many bytes (a context of a million tokens is a few MB of
# text); past it, one line instead of gigabytes in memory and a tokenizer that gives up.
PROMPT_BYTES = 64_000_000


def read_text(value: str, what: str, hint: str) -> str:
    """Text given on the command line, or on stdin when it is '-': refused with one line when it is
    empty, larger than PROMPT_BYTES, or not UTF-8 (bytes that are not UTF-8 reach Python's argv as
    lone surrogates, PEP 383)."""
    import sys

    from tfcli.engine.errors import PromptError
    from tfcli.engine.tokenizer import check_utf8

    if value == "-":
        stdin = getattr(sys.stdin, "buffer", sys.stdin)
        data = stdin.read(PROMPT_BYTES + 1)
        if isinstance(data, str):  # a text stream without a buffer (an embedding program's stdin)
            data = data.encode("utf-8", "surrogateescape")
        if len(data) > PROMPT_BYTES:
            raise PromptError(f"{what} on stdin is more than {PROMPT_BYTES:,} bytes",
                              "give its end only, e.g. with tail -c")
        try:
            value = data.decode("utf-8")
        except UnicodeDecodeError as e:
            raise PromptError(f"stdin is not valid UTF-8 (byte {data[e.start]:#04x} at offset {e.start})",
                              "convert the text to UTF-8") from None
    if value == "":
        raise PromptError(f"{what} is empty", hint)
    check_utf8(value, what)
    return value


THREAD_VARIABLES = ("TFCLI_THREADS", "OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS")  # as auto_threads reads them
MAX_THREADS = 4096  # more than any machine's cores; BLAS takes a C int, and 10**20 is none


def apply_threads(threads: int | None) -> int:
    """Set the thread count for this process (BLAS and prompt parts): the flag, else the environment
    (TFCLI_THREADS, OPENBLAS_NUM_THREADS, OMP_NUM_THREADS), else the idle cores. Returns it.

    More threads than the cores this process may run on only stall each other (--threads 4096 was
    13x slower than 1 here), and BLAS takes a C int: a larger count is brought down to the cores,
    with a warning that says so."""
    import os

    from tfcli.engine.errors import UsageError, shown_number
    from tfcli.engine.threads import auto_threads, available_cpus, set_blas_threads

    from .console import warn

    if threads is not None and not 1 <= threads <= MAX_THREADS:
        bound = "at least 1" if threads < 1 else f"at most {MAX_THREADS:,}"
        raise UsageError(f"--threads must be {bound}, not {shown_number(threads)}", "omit it to use the idle cores")
    n = threads or auto_threads()
    cores = available_cpus()
    if n > cores:
        given = f"--threads {n:,}" if threads else next(
            (f"{var}={v if len(v) <= 24 else v[:21] + '...'}"
             for var in THREAD_VARIABLES
             if (v := os.environ.get(var, "")).isascii() and v.isdigit() and v.strip("0")),
             f"{shown_number(n)} threads")  # fmt: skip
        warn(f"{given} is more than the {cores} core{'s' if cores != 1 else ''} this process may use: using {cores} "
             "(more threads than cores stall each other)")
        n = cores
    elif threads and n > 1:
        _warn_busy(n, cores)
    set_blas_threads(n)
    return n


def _warn_busy(n: int, cores: int) -> None:
    """--threads N on cores other processes are using: one line on what it costs (BLAS threads
    spin waiting for each other; a decode on two busy cores of two ran at a fraction of one
    thread's speed)."""
    from tfcli.engine.threads import busy_cpus

    from .console import warn

    busy = busy_cpus()
    idle = None if busy is None else max(1, cores - busy)
    if idle is not None and n > idle:  # one line: scripts grep it
        warn(f"--threads {n:,} asks for more threads than the {idle} idle core{'s' if idle != 1 else ''} "
             f"({cores - idle} of {cores} busy with other processes): threads on busy cores wait for each other "
             f"and can run many times slower than one; omit --threads to use the idle cores")  # fmt: skip


def model_folder(model: str | None):
    """The folder of -m MODEL; a pullable model used for the first time is pulled, with progress."""
    from tfcli.store.registry import resolve

    from .pull import auto_pull, gguf_once

    return resolve(model, pull=auto_pull, gguf=gguf_once)


def load_model(model: str | None):
    """-m MODEL loaded (a tfcli.engine.LoadedModel); a pullable model is pulled on first use. The
    compiled kernels of a model that runs on them (engine/fast: on_kernels) are loaded now, saying
    so the first time they compile."""
    from tfcli.engine.fast import on_kernels
    from tfcli.store import load

    from .pull import auto_pull, gguf_once

    lm = load(model, pull=auto_pull, gguf=gguf_once)
    if on_kernels(lm.model):  # quantized, or a big float32 model
        from .quantize import kernels_ready

        why = kernels_ready()
        if why:
            lm.warnings.append(why)
    return lm


class Lang(str, Enum):
    en = "en"
    zh = "zh"


def lang_option(help: str):
    """--lang, with what it changes in the command's output."""
    return Annotated[Optional[Lang], typer.Option("--lang", help=help, show_default=False)]


LangOption = lang_option(LANG_HELP)


def chinese(lang: Lang | None) -> bool:
    """--lang, else TFCLI_LANG (en or zh), else the locale (cli/lang.py); a --lang given is this
    run's language from now on, for whatever prints (statistics, progress, errors)."""
    from . import lang as language

    if lang is not None:
        language.choose(lang is Lang.zh)
    return language.zh()


def unknown_id(tokenizer) -> int | None:
    """The id of the tokenizer's unknown token (<unk>, [UNK], <|unk|>), or None."""
    return next((tokenizer.token_id(p) for p in ("<unk>", "[UNK]", "<|unk|>")
                 if tokenizer.token_id(p) is not None), None)


def warn_unknown(tokenizer, text: str, ids: list[int], name: str) -> None:
    """One warning when the tokenizer turned characters of `text` into its unknown token (a
    character-level vocabulary without them: shakespeare and Chinese), naming them and the
    model that can spell them, instead of a model that silently reads '<unk>'."""
    from .console import warn

    unk = unknown_id(tokenizer)
    if unk is None or unk not in ids:
        return
    missing = []
    for ch in dict.fromkeys(text):  # each character once, in order
        if unk in tokenizer.encode(ch):
            missing.append(ch)
        if len(missing) > 8 or len(missing) and len(dict.fromkeys(text)) > 2000:
            break
    shown = " ".join(repr(c) for c in missing[:8]) + (" ..." if len(missing) > 8 else "")
    cjk = any("\u3400" <= c <= "\u9fff" or "\uf900" <= c <= "\ufaff" for c in missing)
    n = ids.count(unk)
    if chinese(None):
        hint = "-m tang 能拼写中文" if cjk else "-m smollm2 能逐字节拼写任何文字"
        warn(f"{name} 的词表拼不出 {shown}：模型把文本中的 {n} 个词元读作 <unk>（{hint}）")
        return
    hint = "-m tang spells Chinese" if cjk else "-m smollm2 spells any text, byte by byte"
    tokens = f"{n} token{'s' if n != 1 else ''}"
    warn(f"{name}'s vocabulary cannot spell {shown}: the model reads {tokens} of the text as <unk> ({hint})")
