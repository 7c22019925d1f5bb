"""The report's charts: matplotlib's Agg backend, SVG with real ``<text>`` and no date stamp.

The same numbers therefore give the same file, searchable and selectable in a browser.
"""

from __future__ import annotations

import io
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from miracl_eval.atomic import atomic_output
from miracl_eval.evaluation import metrics
from miracl_eval.report.plan import row_colors
from miracl_eval.types import PathLike


def pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plt.rcParams.update(
        {"svg.fonttype": "none", "svg.hashsalt": "miracl-eval", "font.family": "DejaVu Sans", "font.size": 10}
    )
    return plt


def save_figure(fig: Any, output: PathLike) -> None:
    """Save a figure atomically (SVG without a date, or PNG), then close it."""
    fmt = Path(output).suffix.lstrip(".").lower() or "svg"
    buf = io.BytesIO()
    metadata = {"Date": None} if fmt == "svg" else {}
    fig.savefig(buf, format=fmt, metadata=metadata, bbox_inches="tight", dpi=110)
    pyplot().close(fig)
    with atomic_output(output) as tmp:
        tmp.write_bytes(buf.getvalue())


def bar_chart(
    values: Mapping[str, Mapping[str, float]],
    columns: Sequence[str],
    output: PathLike,
    title: str,
    ylabel: str,
    methods: Sequence[str] | None = None,
) -> None:
    """A grouped bar chart: one group per column (partition, then ``mean``), one bar per method."""
    plt = pyplot()
    methods = list(values) if methods is None else list(methods)
    n_groups, n_methods = len(columns), max(len(methods), 1)
    # wide enough for the bars and for the legend's row of methods below them
    width = min(24.0, max(6.0, 1.3 * n_methods + 1.0, 0.55 * n_groups * (0.5 + 0.12 * n_methods) + 1.5))
    fig, ax = plt.subplots(figsize=(width, 4.2))
    bar = 0.8 / n_methods
    top = 0.0
    colors = row_colors(methods)
    for i, method in enumerate(methods):
        xs = [g + (i - (n_methods - 1) / 2) * bar for g in range(n_groups)]
        ys = [values[method][c] for c in columns]
        top = max(top, *ys) if ys else top
        ax.bar(xs, ys, bar, label=method, color=colors[method], edgecolor="white", linewidth=0.4)
    ax.set_xticks(range(n_groups), [str(c) for c in columns])
    if metrics.MEAN in columns:
        ax.axvline(columns.index(metrics.MEAN) - 0.5, color="#555", linestyle=":", linewidth=1)
    ax.set_xlim(-0.6, n_groups - 0.4)
    ax.set_ylim(0, min(1.0, max(0.05, top * 1.15)))
    ax.set_ylabel(ylabel)
    ax.set_xlabel("language" if metrics.MEAN in columns else "partition")
    ax.set_title(title)
    ax.grid(axis="y", color="#ddd", linewidth=0.6)
    ax.set_axisbelow(True)
    ax.legend(ncol=min(n_methods, 6), loc="upper center", bbox_to_anchor=(0.5, -0.14), frameon=False)
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)
    save_figure(fig, output)
