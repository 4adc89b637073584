"""The result of tfcli.params: where a shape's parameters live."""

from __future__ import annotations

import html
from dataclasses import dataclass

from .result import Result, WIDTH, clip


# --- parameters -------------------------------------------------------------------------------


@dataclass(repr=False)
class Params(Result):
    """Where a shape's parameters live (`tfcli params`): `report` is the command's --json
    document; `tally` (3Blue1Brown's count of the weight matrices) and `total` (every tensor).

    >>> import tfcli
    >>> tfcli.params("gpt2").total
    124439808
    """

    report: dict

    @property
    def tally(self) -> int:
        return int(self.report["tally_3b1b"]["total"])

    @property
    def total(self) -> int:
        return int(self.report["exact"]["total"])

    def text(self) -> str:
        r = self.report
        rows = r["tally_3b1b"]["rows"]
        w = max(len(x["name"]) for x in rows)
        lines = [f"{r['title']} · 3Blue1Brown's tally of the weight matrices"]
        lines += [f"  {x['name']:<{w}} {x['count']:>18,}  {x['formula']} = {x['numbers']}" for x in rows]
        lines.append(f"  {'total':<{w}} {self.tally:>18,}")
        lines.append(f"every tensor a checkpoint stores: {self.total:,} (difference {self.tally - self.total:+,})")
        return "\n".join(clip(s, WIDTH) for s in lines)

    def to_dict(self) -> dict:
        return self.report

    def _html_body(self) -> str:
        e = html.escape
        rows = "".join(
            f"<tr><td>{e(x['name'])}</td><td "
            f"style='text-align:right'>{x['count']:,}</td><td>{e(x['formula'])}</td><td>{e(x['numbers'])}</td></tr>"
            for x in self.report["tally_3b1b"]["rows"]
        )
        return (
            f"<div><b>{e(self.report['title'])}</b><table>{rows}"
            f"<tr><th>total</th><th style='text-align:right'>{self.tally:,}</th></tr></table>"
            f"every tensor: {self.total:,}</div>"
        )
