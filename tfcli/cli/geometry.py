"""tfcli geometry: how nearly orthogonal random directions are in D dimensions, computed (not quoted),
beside a model's own token vectors."""

from __future__ import annotations

import math
from typing import Annotated, Optional

import typer

from . import options
from .console import note


Png = options.png_option("the histograms", " (needs Pillow)")
Svg = options.svg_option("the histograms")


def geometry(
    model: options.Model = None,
    dims: Annotated[Optional[str], typer.Option(
        "--dims", help="The dimensions to sample, comma-separated "
                       "(default: 3,10,100,1000,4096,12288 and the model's own).", show_default=False)] = None,
    sample: Annotated[int, typer.Option(
        "--sample", help="Random vectors per dimension (all their pairs are measured).")] = 600,
    seed: options.Seed = None,
    png: Png = None,
    svg: Svg = None,
    lang: options.LangOption = None,
    as_json: options.Json = False,
) -> None:
    """Near-orthogonality: the angles between random directions in D dimensions, and a model's own.

    Random unit vectors in D dimensions meet at angles near 90°, the more so the larger D: the
    cosine between two of them has mean 0 and standard deviation exactly 1/√D, and the angle has
    density ∝ sin^(D-2) θ. The command samples them (fixed seed), computes the exact shares from
    that density, says what the Johnson–Lindenstrauss lemma promises, and measures the same for
    the model's token embeddings.

    Examples:

      tfcli geometry

      tfcli geometry -m smollm2 --png angles.png

      tfcli geometry --dims 3,768,12288 --sample 1000 --json
    """
    from tfcli.analysis import geometry as g
    from tfcli.engine.errors import UsageError, shown_number

    zh = options.chinese(lang)
    if sample < 2 or sample > 5000:
        raise UsageError(f"--sample must be between 2 and 5000, not {sample}", "all sample² / 2 pairs are measured")
    wanted = _dims(dims)
    from .inputs import load

    lm = load(model)
    d_model = lm.config.d_model
    if dims is None:
        wanted = sorted(set(g.DIMS) | {d_model})
    seed = 0 if seed is None else seed
    if not 0 <= seed < 2**63:  # as generate's --seed
        raise UsageError(f"--seed must be between 0 and 2^63-1, not {shown_number(seed)}")
    from tfcli.engine.memory import check_allocation

    # The largest dimension's sample as float64 (and its normalised copy), and the sample^2 cosines, angles and mask.
    check_allocation(2 * sample * max(wanted) * 8 + 4 * sample * sample * 8,
                     f"--sample {sample:,} vectors in {max(wanted):,} dimensions",
                     "use a smaller --sample or smaller --dims")
    _say_if_long(wanted, sample)
    rows = (g.random_stats(wanted, sample, seed)
            + g.embedding_stats(lm.model.token_embedding[: lm.config.vocab_size], sample, seed))
    promises = []
    for d in sorted({d_model, 12_288}):
        for b in g.BANDS:
            p = next((r.exact_within[b] for r in rows if r.d == d and r.exact_within), None)
            # a tiny tail: computed on its own
            outside = 1.0 - p if p is not None and p < 0.999 else g.exact_outside(d, b)
            promises.append({"d": d, "band": b, "exact_outside": outside,
                             "random_before_a_miss": _or_none(g.pairs_before_a_miss(outside)),
                             "log10_guaranteed": g.log10_union_bound(d, b)})
    jl = [{"d": d, "eps": e, "log10_points": g.log10_jl_points(d, e)} for d in sorted({d_model, 12_288})
          for e in (0.1, 0.2)]
    report = {
        "model": lm.name, "d_model": d_model, "seed": seed, "sample": sample,
        "rows": [_row(r) for r in rows], "promises": promises, "jl": jl,
        "histogram_edges": g.HIST_EDGES.tolist(),
    }  # fmt: skip
    if png or svg:
        _images(report, png, svg)
    if as_json:
        from .json import emit

        emit(report)  # the one float policy of every --json (cli/json.py)
        return
    from .views import geometry as view

    view.render(report, zh)


def _or_none(x: float) -> float | None:
    return x if math.isfinite(x) else None  # JSON has no infinity


def _row(s) -> dict:
    return {
        "label": s.label, "d": s.d, "pairs": s.pairs, "mean_angle": s.mean_angle, "std_angle": s.std_angle,
        "mean_cos": s.mean_cos, "std_cos": s.std_cos, "expected_std_cos": 1 / math.sqrt(s.d),
        "within": {f"{b:g}": v for b, v in s.within.items()},
        "exact_within": None if s.exact_within is None else {f"{b:g}": v for b, v in s.exact_within.items()},
        "histogram": s.histogram.tolist(),
    }  # fmt: skip


NORMALS_PER_S, MACS_PER_S = 3e7, 1e10  # drawing normal numbers, and float64 multiply-adds in BLAS (2 cores, measured)


def _say_if_long(dims: list[int], sample: int) -> None:
    """The time a run will take, said before it starts when it is more than a few seconds: each
    dimension d draws sample x d normal numbers and multiplies them into sample^2 / 2 cosines."""
    seconds = sum(sample * d / NORMALS_PER_S + sample * sample * d / 2 / MACS_PER_S for d in dims)
    if seconds > 5:
        from .console import note

        note(f"about {seconds:,.0f} s: {sample:,} vectors in each of {len(dims)} "
             f"dimension{'s' if len(dims) != 1 else ''} up to {max(dims):,} (use a smaller --sample "
             "or --dims for less)")


def _dims(spec: str | None) -> list[int]:
    from tfcli.engine.errors import UsageError

    if spec is None:
        return []
    try:
        dims = sorted({int(x) for x in spec.split(",") if x.strip()})
    except ValueError:
        raise UsageError(f"--dims {spec!r} is not a comma-separated list of whole numbers",
                         "e.g. --dims 3,768,12288") from None
    if not dims or dims[0] < 2 or dims[-1] > 100_000:
        raise UsageError(f"--dims {spec!r}: each dimension must be between 2 and 100,000")
    return dims


def _images(report: dict, png, svg) -> None:
    from tfcli.draw import images
    from .views.geometry import drawing

    d = drawing(report)
    if png:
        images.write_png(png, d, images.fonts_or_none())
        note(f"wrote {png} ({d.width}×{d.height} px)")
    if svg:
        images.write_svg(svg, d)
        note(f"wrote {svg} ({d.width}×{d.height} px)")

