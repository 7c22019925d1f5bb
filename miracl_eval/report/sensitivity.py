"""Report page: the fused methods' sensitivity to the sparse weight
(:func:`miracl_eval.evaluation.sensitivity.sensitivity_table`), one panel per partition, labelled as
what it is: a view on the evaluation set, never used to pick weights.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from miracl_eval.evaluation import metrics, sensitivity
from miracl_eval.report.charts import pyplot, save_figure
from miracl_eval.report.plan import row_colors
from miracl_eval.types import PathLike

SENSITIVITY_LABEL = (
    "sensitivity on the evaluation set; headline numbers use the fixed paper weights, never tuned on test queries"
)


def sensitivity_weights(fixed: float, grid: Sequence[float] = sensitivity.DEFAULT_WEIGHTS) -> list[float]:
    """The sparse-weight grid, with the fixed (headline) weight added when it is not on it."""
    weights = [float(w) for w in grid]
    if not any(math.isclose(w, fixed, abs_tol=1e-12) for w in weights):
        weights.append(float(fixed))
    return sorted(weights)


def sensitivity_plot(
    rows: Sequence[sensitivity.SensitivityRow],
    partitions: Sequence[str],
    methods: Sequence[str],
    fixed_weight: float,
    output: PathLike,
    mean_panel: bool = True,
    title: str = "",
) -> None:
    """One panel per partition (and the mean): nDCG@10 against the sparse weight, a line per method."""
    plt = pyplot()
    data: dict[tuple[str, str], list[tuple[float, float]]] = {}
    for r in rows:
        data.setdefault((r["partition"], r["method"]), []).append((r["sparse_weight"], r["ndcg10"]))
    panels = list(partitions)
    if mean_panel and len(partitions) > 1:
        for m in methods:
            series = [data.get((p, m), []) for p in partitions]
            if all(series):
                ws = [w for w, _ in series[0]]
                data[(metrics.MEAN, m)] = [(w, sum(s[i][1] for s in series) / len(series)) for i, w in enumerate(ws)]
        panels.append(metrics.MEAN)
    ncols = min(6, len(panels))
    nrows = -(-len(panels) // ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(3.0 * ncols + 0.4, 2.5 * nrows + 1.3), squeeze=False)
    for k, ax in enumerate(axes.flat):
        if k >= len(panels):
            ax.set_visible(False)
            continue
        part = panels[k]
        colors = row_colors(methods)
        for m in methods:
            pts = sorted(data.get((part, m), []))
            if pts:
                ax.plot(
                    [w for w, _ in pts],
                    [v for _, v in pts],
                    marker="o",
                    markersize=3,
                    label=m,
                    color=colors[m],
                )
        ax.axvline(fixed_weight, color="#555", linestyle="--", linewidth=1)
        ax.set_title(part, fontsize=10, fontweight="bold" if part == metrics.MEAN else "normal")
        ax.set_xlim(-0.03, max(1.0, fixed_weight) + 0.03)
        ax.grid(color="#e3e3e3", linewidth=0.5)
        if k % ncols == 0:
            ax.set_ylabel("nDCG@10")
        if k >= len(panels) - ncols:
            ax.set_xlabel("sparse weight")
    handles, labels = axes.flat[0].get_legend_handles_labels()
    handles.append(plt.Line2D([], [], color="#555", linestyle="--", linewidth=1))
    labels.append(f"fixed paper weight ({fixed_weight:g})")
    fig.legend(handles, labels, loc="lower center", ncol=len(labels), frameon=False, bbox_to_anchor=(0.5, -0.02))
    heading = title or "Fusion sensitivity: nDCG@10 as the sparse weight varies (dense = 1, multi-vector = 1)"
    fig.suptitle(f"{heading}\n{SENSITIVITY_LABEL[0].upper()}{SENSITIVITY_LABEL[1:]}", fontsize=11)
    fig.tight_layout(rect=(0, 0.05, 1, 1))
    save_figure(fig, output)


def sensitivity_stage(
    components: Sequence[PathLike],
    qrels: Sequence[PathLike],
    partitions: Sequence[str],
    methods: Sequence[str],
    weights: Sequence[float],
    fixed_weight: float,
    tsv_out: PathLike,
    chart_out: PathLike,
    mean_panel: bool = True,
    dataset: str = "",
) -> dict[str, int]:
    """Stage entry point. ``components`` are ordered partition-major, method-minor; ``qrels``
    follow ``partitions``."""
    files = metrics.keyed_inputs(components, methods, partitions, "component files")
    by_part = {p: {m: files[(m, p)] for m in methods} for p in partitions}
    qrels_by_part = dict(zip(partitions, qrels, strict=True))
    rows = sensitivity.sensitivity_table(by_part, qrels_by_part, weights, methods, output=tsv_out)
    title = "Fusion sensitivity: nDCG@10 as the sparse weight varies (dense = 1, multi-vector = 1)"
    if dataset:
        title = f"{dataset}: {title[0].lower()}{title[1:]}"
    sensitivity_plot(rows, partitions, methods, fixed_weight, chart_out, mean_panel, title)
    return {"rows": len(rows)}
