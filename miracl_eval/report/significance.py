"""Report page: paired significance (:func:`miracl_eval.evaluation.significance.significance_table`)
for the method pairs of :func:`miracl_eval.report.plan.comparison_pairs` and every measure, as TSV
and as a readable matrix (pair x partition).
"""

from __future__ import annotations

import html
from collections.abc import Sequence

from miracl_eval.atomic import write_text_atomic
from miracl_eval.evaluation import metrics, significance
from miracl_eval.report.html import fmt, html_page, html_table, measure_label, signed
from miracl_eval.types import PathLike


def significance_html(
    rows: Sequence[significance.SignificanceRow], title: str, alpha: float = 0.05, note: str | None = None
) -> str:
    """The significance rows as one matrix per measure (pair × partition), then in full."""
    body: list[str] = []
    measures = list(dict.fromkeys(str(r["measure"]) for r in rows))
    for measure in measures:
        sub = [r for r in rows if r["measure"] == measure]
        parts = list(dict.fromkeys(str(r["partition"]) for r in sub))
        pairs = list(dict.fromkeys((str(r["method_a"]), str(r["method_b"])) for r in sub))
        by_key = {(str(r["method_a"]), str(r["method_b"]), str(r["partition"])): r for r in sub}
        table_rows, classes, titles = [], [], []
        for a, b in pairs:
            cells, cls, tit = [f"{a} − {b}"], [""], [""]
            for p in parts:
                r = by_key.get((a, b, p))
                if r is None:
                    cells.append("")
                    cls.append("")
                    tit.append("")
                    continue
                diff, pv = r["diff"], r["p_holm"]
                stars = "**" if pv < alpha / 5 else "*" if pv < alpha else ""
                cells.append(f"{signed(diff)}{stars}")
                sig = "sig-pos" if pv < alpha and diff > 0 else "sig-neg" if pv < alpha and diff < 0 else ""
                cls.append(" ".join(k for k in (sig, "mean" if p == metrics.MEAN else "") if k))
                tit.append(
                    f"{a} {r['mean_a']:.4f}, {b} {r['mean_b']:.4f}; "
                    f"95% CI of the difference [{r['ci_low']:+.4f}, {r['ci_high']:+.4f}]; "
                    f"p = {r['p_value']:.4g} (Holm {pv:.4g}, BH {r['p_bh']:.4g}); {r['n_queries']} queries"
                )
            table_rows.append(cells)
            classes.append(cls)
            titles.append(tit)
        header_classes = ["", *("mean" if p == metrics.MEAN else "" for p in parts)]
        body.append(f"<h2>{html.escape(measure_label(measure))}: difference A − B</h2>")
        body.append(html_table(["A − B", *parts], table_rows, classes, titles, header_classes=header_classes))
    body.append(
        f"<p class='note'>* p &lt; {alpha:g}, ** p &lt; {alpha / 5:g} after Holm-Bonferroni's correction over every "
        "comparison of the measure (two-sided paired randomisation test); green: A significantly better, red: B "
        "significantly better. Hover a cell for the means, the bootstrap CI and the raw and corrected p.</p>"
    )
    if rows:
        full = [
            [
                measure_label(str(r["measure"])),
                r["partition"],
                r["method_a"],
                r["method_b"],
                fmt(r["mean_a"]),
                fmt(r["mean_b"]),
                signed(r["diff"]),
                f"[{r['ci_low']:+.4f}, {r['ci_high']:+.4f}]",
                f"{r['p_value']:.4g}",
                f"{r['p_holm']:.4g}",
                f"{r['p_bh']:.4g}",
                r["n_queries"],
            ]
            for r in rows
        ]
        header = [
            "measure", "partition", "A", "B", "mean A", "mean B", "A − B", "95% CI", "p", "p Holm", "p BH", "queries",
        ]  # fmt: skip
        body += ["<h2>All rows</h2>", html_table(header, full)]
    else:
        body.append("<p>No method pairs to compare.</p>")
    return html_page(title, "\n".join(body), note)


def significance_stage(
    per_query_files: Sequence[PathLike],
    methods: Sequence[str],
    partitions: Sequence[str],
    pairs: Sequence[Sequence[str]],
    measures: Sequence[str],
    tsv_out: PathLike,
    html_out: PathLike,
    mean_row: bool = True,
    n_permutations: int = significance.N_PERMUTATIONS,
    n_bootstrap: int = significance.N_BOOTSTRAP,
    seed: int = significance.SEED,
    dataset: str = "",
) -> dict[str, int]:
    """Stage entry point: paired tests of ``pairs`` for every measure, per partition and (with
    ``mean_row``) over the partitions; TSV with :data:`miracl_eval.evaluation.significance.COLUMNS` and HTML."""
    files = metrics.keyed_inputs(per_query_files, methods, partitions)
    pair_list = [(str(a), str(b)) for a, b in pairs]
    rows: list[significance.SignificanceRow] = []
    for measure in measures:
        rows += significance.significance_rows(
            files,
            pair_list,
            measure,
            partitions,
            n_permutations=n_permutations,
            n_bootstrap=n_bootstrap,
            seed=seed,
            mean_row=mean_row,
        )
    write_text_atomic(tsv_out, significance.format_rows(rows))
    note = (
        f"Paired tests on the same queries: randomisation (sign-flip) test, {n_permutations} permutations; "
        f"percentile bootstrap CI, {n_bootstrap} resamples; seed {seed}."
        + (
            " The mean row is stratified by language (each language weighs 1/L, as in the mean column)."
            if mean_row
            else " No mean over partitions (they overlap)."
        )
        + " p Holm and p BH: Holm-Bonferroni (family-wise error) and Benjamini-Hochberg (false discovery rate)"
        " over every comparison of the measure (pairs x partitions, mean rows included)."
    )
    title = f"Paired significance — {dataset}" if dataset else "Paired significance"
    write_text_atomic(html_out, significance_html(rows, title, note=note))
    return {"rows": len(rows), "pairs": len(pair_list)}
