"""What the report compares and shows, planned from the configured rows (no files read).

The rows are labels (``bm25``, ``{model}/{method}``, hybrid names; :mod:`miracl_eval.config.systems`):
the comparison pairs, the report's files, the colours and the settings page all follow them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from miracl_eval.config.rerankers import THEN
from miracl_eval.config.systems import BM25, computed_systems, systems
from miracl_eval.encoders.registry import FAMILIES
from miracl_eval.evaluation import sensitivity
from miracl_eval.fusion.weighted import FUSED_COMPONENTS
from miracl_eval.rerankers.registry import FAMILIES as RERANKER_FAMILIES

#: the colour of the bm25 row; the other rows take PALETTE's colours in table order
BM25_COLOR = "#7f7f7f"
PALETTE: tuple[str, ...] = (
    "#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#d62728", "#8c564b", "#e377c2", "#bcbd22", "#17becf",
    "#393b79", "#637939", "#8c6d31", "#843c39", "#7b4173",
)  # fmt: skip
#: the global encoder settings shown for every model
ENCODER_KEYS: tuple[str, ...] = ("batch_size", "shard_size", "device", "dtype", "dense_dtype")
DENSE_INDEX_KEYS: Mapping[str, tuple[str, ...]] = {
    "flat": (),
    "hnsw": ("hnsw_m", "hnsw_ef_search"),
    "ivfpq": ("ivf_lists", "pq_m", "nprobe"),
}


def _model_and_method(label: str) -> tuple[str | None, str]:
    if THEN in label:  # a reranked row: neither a model's method nor fused
        return None, label
    model, sep, method = label.rpartition("/")
    return (model, method) if sep else (None, label)


def row_colors(labels: Sequence[str]) -> dict[str, str]:
    """A fixed colour per row label: bm25 grey, the others the palette's in table order."""
    colors: dict[str, str] = {}
    others = 0
    for label in dict.fromkeys(labels):
        if label == BM25:
            colors[label] = BM25_COLOR
        else:
            colors[label] = PALETTE[others % len(PALETTE)]
            others += 1
    return colors


def comparison_pairs(
    labels: Sequence[str], hybrids: Mapping[str, Mapping[str, Any]] | None = None
) -> list[tuple[str, str]]:
    """The ``(a, b)`` row pairs compared on the same queries, from the rows alone.

    Every row against ``bm25`` (when ``bm25`` is a row); each model's fused rows (``{m}/all``,
    ``{m}/dense+sparse``) against its ``{m}/dense``; each hybrid against each of its members; each
    reranked row against its first stage (when that is a row). What each model adds over lexical
    retrieval, what fusion adds over dense retrieval alone, what a hybrid adds over its parts and what
    a reranker adds over the ranking it reorders.
    """
    present = list(dict.fromkeys(labels))
    pairs: list[tuple[str, str]] = []
    if BM25 in present:
        pairs += [(m, BM25) for m in present if m != BM25]
    for label in present:
        model, method = _model_and_method(label)
        fuses_several = len(FUSED_COMPONENTS.get(method, ())) > 1  # all, dense+sparse (not multivec alone)
        if model is not None and fuses_several and f"{model}/dense" in present:
            pairs.append((label, f"{model}/dense"))
    for name, hybrid in (hybrids or {}).items():
        if name in present:
            pairs += [(name, member) for member in hybrid["systems"] if member in present]
    for label in present:
        first, then, _ = label.rpartition(THEN)
        if then and first in present:
            pairs.append((label, first))
    return list(dict.fromkeys(pairs))


def swept_rows(labels: Sequence[str]) -> list[str]:
    """The rows of the fusion sensitivity view: fused rows whose sparse weight can be varied."""
    return [label for label in labels if _model_and_method(label)[1] in sensitivity.METHODS]


def report_pages(
    measure_keys: Sequence[str],
    labels: Sequence[str],
    hybrids: Mapping[str, Mapping[str, Any]] | None = None,
) -> list[tuple[str, str]]:
    """The report's files as ``(page, extension)`` pairs (the workflow's ``report_file`` paths), but the
    stage costs (which summarise the jobs of all of them): a function of the rows alone (significance
    needs a pair, sensitivity a fused row)."""
    pages = [(key, ext) for key in measure_keys for ext in ("html", "svg")]
    pages += [("published", "tsv"), ("published", "html"), ("comparability", "tsv"), ("context", "tsv")]
    if comparison_pairs(labels, hybrids):
        pages += [(name, ext) for name in ("significance", "top_differences") for ext in ("tsv", "html")]
    if swept_rows(labels):
        pages += [("sensitivity", "tsv"), ("sensitivity", "svg")]
    pages += [("settings", "tsv"), ("settings", "html"), ("forecast", "tsv"), ("forecast", "html")]
    return pages


def plain_report_problem(argv: Sequence[str], missing: Sequence[str]) -> str | None:
    """One line for ``snakemake --report`` without ``--report-after-run`` when report files are
    ``missing``: Snakemake then only collects the files and stops at the first missing one (for
    instance after ``make run``, which builds the tables alone). None otherwise."""
    plain = any(a == "--report" or a.startswith("--report=") for a in argv) and "--report-after-run" not in argv
    if not plain or not missing:
        return None
    return (
        f"snakemake --report: {len(missing)} of the report's files do not exist yet ({missing[0]}, ...); build them "
        "and the report in one go with `make report` (the bundled sample), or add --report-after-run to this command."
    )


def _flat(spec: Mapping[str, Any], prefix: str = "") -> dict[str, object]:
    out: dict[str, object] = {}
    for key, value in spec.items():
        if isinstance(value, Mapping):
            out.update(_flat(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def run_settings(
    config: Mapping[str, Any],
    dataset: str,
    languages: bool = True,
    pairs: Sequence[Sequence[str]] = (),
    significance_settings: Mapping[str, object] | None = None,
) -> dict[str, dict[str, object]]:
    """The settings a reader needs to interpret the numbers, by section and configuration key,
    from the validated configuration; only those of the configured rows. ``languages``:
    whether the partitions are languages (MIRACL) or not (MessIRve)."""
    rows = systems(config)
    computed = computed_systems(config)  # the rows and the first stages they rerank
    labels = [s.label for s in rows]
    source = config.get("source")
    settings: dict[str, dict[str, object]] = {
        "data": {
            "dataset": dataset,
            "split": config["split"],
            "languages" if languages else "partitions": list(config["languages"]),
            "source": dict(source) if source else f"Hugging Face hub, revision {config['hub']['revision']}",
            "title_join": config["title_join"],
        },
        "retrieval": {"methods": labels, "hits": config["hits"]},
    }
    if any(s.label == BM25 for s in computed):
        settings["bm25"] = {f"bm25.{k}": v for k, v in config["bm25"].items()}
    used = list(dict.fromkeys(s.model for s in computed if s.model))
    for name in used:
        spec = config["models"][name]
        settings[f"model {name}"] = {f"models.{name}.{k}": v for k, v in _flat(spec).items()}
    if used:
        settings["encoder"] = {f"encoder.{k}": config["encoder"][k] for k in ENCODER_KEYS}
    if any("dense" in FAMILIES[config["models"][m]["family"]].outputs for m in used):
        index = config["dense_index"]
        keys = ("type", *DENSE_INDEX_KEYS.get(index["type"], ()), "gpu")
        settings["dense index"] = {f"dense_index.{k}": index[k] for k in keys if k in index}
    if any(s.method in FUSED_COMPONENTS for s in computed):
        settings["multi-vector rerank and fusion"] = {"query_chunk": config["query_chunk"]}
    for s in computed:
        if s.hybrid:
            settings[f"hybrid {s.hybrid}"] = {
                f"hybrids.{s.hybrid}.{k}": v for k, v in config["hybrids"][s.hybrid].items()
            }
    for name in dict.fromkeys(s.reranker for s in computed if s.reranker):
        spec = config["rerankers"][name]
        settings[f"reranker {name}"] = {
            "reranks": [s.first_stage.label for s in computed if s.reranker == name and s.first_stage],
            "score": RERANKER_FAMILIES[spec["family"]].score,
            **{f"rerankers.{name}.{k}": v for k, v in _flat(spec).items()},
            "query_chunk": config["query_chunk"],
        }
    if pairs:
        sig = dict(significance_settings or {})
        settings["significance"] = {"pairs (A vs B)": [f"{a} vs {b}" for a, b in pairs]} | {
            {"n_permutations": "permutations", "n_bootstrap": "bootstrap resamples"}.get(k, k): v
            for k, v in sig.items()
        }
    return settings
