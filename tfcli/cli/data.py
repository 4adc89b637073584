"""tfcli data: the corpora the recipes use, where they come from, and a copy of each in the cache.

    tfcli data                          the corpora: source, licence, size, present or not (also: data list)
    tfcli data pull shakespeare         download it (sha256 pinned) into $TFCLI_HOME/data
    tfcli data path shakespeare         its path: --file "$(tfcli data path shakespeare)"

The corpora are not shipped with the package (store/corpora.py says why and where each is from).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer
from typer.core import TyperGroup

from . import options
from .command import Command, Tidy
from .console import note, out
from .lang import say, zh


class Group(Tidy, TyperGroup):
    """The data group: its -h/--help a flag without a type, as every command's."""


app = typer.Typer(
    cls=Group,
    name="data",
    invoke_without_command=True,
    context_settings={"help_option_names": ["-h", "--help"]},
)

Name = Annotated[
    str,
    typer.Argument(help="The corpus: shakespeare, tang or tang-traditional (see 'tfcli data').", show_default=False),
]


@app.callback()
def listing(ctx: typer.Context, as_json: options.Json = False, lang: options.LangOption = None) -> None:
    """The corpora the recipes use (features train, train, the model cards' score --file): where each
    comes from, its licence, its size, and whether it is in the cache ($TFCLI_HOME/data).

    Examples:

      tfcli data

      tfcli data pull shakespeare

      tfcli features train -m shakespeare "$(tfcli data path shakespeare)" --block 2 -o sae-shakespeare

      TFCLI_DATA_URL=http://mirror.example/corpora tfcli data pull tang
    """
    if ctx.invoked_subcommand is None:
        _list(as_json, lang)


@app.command("list", cls=Command)
def list_corpora(as_json: options.Json = False, lang: options.LangOption = None) -> None:
    """The corpora, as 'tfcli data' lists them.

    Example:

      tfcli data list --json
    """
    _list(as_json, lang)


def _list(as_json: bool, lang) -> None:
    from tfcli.numbers import size
    from tfcli.store.corpora import CORPORA, MIRROR, is_present, path_of

    options.chinese(lang)
    if as_json:
        from .json import emit

        emit({"corpora": [
            {"name": c.name, "file": c.file, "bytes": c.size, "sha256": c.sha256, "source": c.source,
             "licence": c.licence, "url": c.url, "derived": c.derived, "present": is_present(c),
             "path": str(path_of(c))}
            for c in CORPORA.values()
        ]})  # fmt: skip
        return
    from rich.table import Table

    t = Table(box=None, pad_edge=False, show_header=True, header_style="bold")
    for header in (
        say("name", "名称"),
        say("size", "大小"),
        say("here", "已下载"),
        say("source and licence", "来源与许可"),
    ):
        t.add_column(header, overflow="fold")
    for c in CORPORA.values():
        how = (
            say(f"tfcli data pull {c.name} downloads it", f"tfcli data pull {c.name} 可下载")
            if c.url
            else say("made from its source, no file to download: --from FILE",
                     "由来源加工而成，无文件可下载：用 --from 文件")
        )
        here = say("yes", "是") if is_present(c) else say("no", "否")
        source = f"{c.source_zh}（{c.licence_zh}）" if zh() else f"{c.source} ({c.licence})"
        t.add_row(c.name, size(c.size), here, f"{source}\n[dim]{how}[/]")
    out.print(t)
    note(
        say(
            f"pull one with 'tfcli data pull NAME'; {MIRROR} names a mirror that holds the files, for offline use",
            f"用 'tfcli data pull 名称' 下载；{MIRROR} 可指向存放这些文件的镜像，供离线使用",
        ),
        wrap=True,
    )


@app.command("path", cls=Command)
def path(name: Name, lang: options.LangOption = None) -> None:
    """Print the path of a pulled corpus, for --file "$(tfcli data path NAME)".

    Example:

      tfcli score -m shakespeare --file "$(tfcli data path shakespeare)" --window 128
    """
    from tfcli.engine.errors import PullError
    from tfcli.store.corpora import corpus, is_present, path_of

    options.chinese(lang)
    c = corpus(name)
    if not is_present(c):
        raise PullError(f"the corpus {name} is not in the cache yet", f"run: tfcli data pull {name}")
    print(path_of(c))


@app.command("pull", cls=Command)
def pull(
    name: Name,
    source: Annotated[
        Optional[Path],
        typer.Option(
            "--from",
            help="Your copy of the file instead of a download (its sha256 is checked).",
            show_default=False,
            dir_okay=False,
        ),
    ] = None,
    force: Annotated[bool, typer.Option("--force", help="Download (or copy) again even if it is there.")] = False,
    lang: options.LangOption = None,
) -> None:
    """Download a corpus from its public source into the cache ($TFCLI_HOME/data), checked against
    its pinned sha256; with TFCLI_DATA_URL set, from that mirror instead. A corpus no public file
    gives byte for byte (the Tang poems) is taken from --from FILE or the mirror.

    Examples:

      tfcli data pull shakespeare

      tfcli data pull tang --from ~/corpora/tang_poems_simplified.txt
    """
    from tfcli.numbers import size
    from tfcli.store import corpora

    from .progress import Bars
    from .unwind import sigterm_unwinds

    options.chinese(lang)
    c = corpora.corpus(name)
    was = corpora.is_present(c)
    with sigterm_unwinds(), Bars({"download": say(f"downloading {c.file}", f"正在下载 {c.file}"),
                                     "copy": say(f"copying {c.file}", f"正在复制 {c.file}")}) as progress:
        where = corpora.pull(name, source, force, progress)
    said = (
        say("already there", "已在缓存中")
        if was and not force and source is None
        else say("checked (sha256)", "已核对 sha256")
    )
    # prose for a reader, wrapped between words (never inside the path); scripts read `tfcli data path`
    note(f"{name}: {where} ({size(c.size)}, {said})" if not zh() else f"{name}：{where}（{size(c.size)}，{said}）",
         wrap=True)  # fmt: skip


def tidy_help(unwrapped, summary) -> None:
    """The app's help rules (cli/__init__.py) for this group too: paragraphs unwrapped, a summary each."""
    import inspect

    for info in (*app.registered_commands, app.registered_callback):
        doc = inspect.getdoc(info.callback) or ""
        info.help = unwrapped(doc)
        if hasattr(info, "short_help"):
            info.short_help = info.short_help or summary(doc)
