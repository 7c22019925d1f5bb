"""The retrieval scores MTEB reports for a run, computed as MTEB computes them (its
``_evaluators/retrieval_metrics.py``): nDCG, MAP, Recall, Precision, MRR and hit rate at 1, 3, 5, 10, 20, 100
and 1000 (pytrec_eval's), ``accuracy`` (Recall@1), and the normalised areas under the abstention curves
(``nauc_*``, Gisserot-Boukhlef et al. 2024, arXiv:2402.12997) of every per-query measure against three
confidences of each query's hit scores (the highest, their standard deviation, the gap between the first two).

One difference, as in the tables: every judged query counts, a query without hits with 0 (MTEB leaves it out).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import numpy as np

from miracl_eval.schemas import EVAL_CHUNK

K_VALUES = (1, 3, 5, 10, 20, 100, 1000)
#: our name -> pytrec_eval's measure
_PYTREC = {"ndcg": "ndcg_cut", "map": "map_cut", "recall": "recall", "precision": "P", "hit_rate": "success"}
#: the per-query measures whose nAUC MTEB reports (its key spelling, lower-cased: nauc_{measure}_at_{k}_{confidence})
_NAUC = ("ndcg", "map", "recall", "precision", "mrr")
#: the abstention rates of MTEB's curves: 0, 0.1, ... 0.9
ABSTENTION_RATES = np.linspace(0, 1, 11)[:-1]
CONFIDENCES = ("max", "std", "diff1")


def confidence(scores: list[float]) -> dict[str, float]:
    """A query's confidences: its highest hit score, the scores' standard deviation, the first two's gap."""
    if not scores:
        return dict.fromkeys(CONFIDENCES, 0.0)
    ranked = sorted(scores, reverse=True)
    return {
        "max": ranked[0],
        "std": float(np.std(scores)),
        "diff1": ranked[0] - ranked[1] if len(ranked) > 1 else 0.0,
    }


def _curve(conf: np.ndarray, values: np.ndarray) -> np.ndarray:
    """The mean value of the queries kept at each abstention rate (the least confident left out first),
    a group of equal confidences counting its mean (MTEB's tie rule)."""
    order = np.argsort(conf, stable=True)
    keys, vals = conf[order], values[order]
    starts = np.flatnonzero(np.r_[True, keys[1:] != keys[:-1]])
    sizes = np.diff(np.r_[starts, len(keys)])
    vals = np.repeat(np.add.reduceat(vals, starts) / sizes, sizes)
    cut = [min(round(rate * len(order)), len(conf) - 1) for rate in ABSTENTION_RATES]
    return np.array([vals[c:].mean() for c in cut])


def nauc(conf: np.ndarray, values: np.ndarray) -> float:
    """The abstention curve's area, scaled between a flat curve's (0) and the oracle's (1); NaN when
    those two are equal."""
    if conf.size == 0:
        return float("nan")
    curve, oracle = _curve(conf, values), _curve(values, values)
    area, best = np.trapezoid(curve, ABSTENTION_RATES), np.trapezoid(oracle, ABSTENTION_RATES)
    flat = oracle[0] * (ABSTENTION_RATES[-1] - ABSTENTION_RATES[0])
    return float("nan") if best == flat else float((area - flat) / (best - flat))


def retrieval_scores(
    run: Iterable[tuple[str, Mapping[str, float]]], qrels: Mapping[str, Mapping[str, int]], chunk: int = EVAL_CHUNK
) -> dict[str, float]:
    """MTEB's retrieval scores of a run given as ``(qid, {docid: score})`` per query, over every judged query
    (one without hits counts 0), the pytrec_eval measures rounded to 5 decimals as MTEB rounds them (MRR and
    the nAUCs unrounded, as MTEB leaves them); queries are evaluated ``chunk`` at a time. MRR ranks ties by docid, descending, as
    pytrec_eval does."""
    import pytrec_eval

    ks = ",".join(map(str, K_VALUES))
    measures = {f"{name}.{ks}" for name in _PYTREC.values()}
    per_query: dict[str, dict[str, float]] = {}
    confidences: dict[str, dict[str, float]] = {}

    def evaluate(pending: dict[str, dict[str, float]]) -> None:
        if not pending:
            return
        judged = {q: dict(qrels[q]) for q in pending}
        for q, scores in pytrec_eval.RelevanceEvaluator(judged, measures).evaluate(pending).items():
            row = per_query[q] = {f"{ours}_at_{k}": scores[f"{theirs}_{k}"] for ours, theirs in _PYTREC.items()
                                  for k in K_VALUES}  # fmt: skip
            relevant = {d for d, rel in qrels[q].items() if rel > 0}
            ranked = sorted(pending[q].items(), key=lambda item: (item[1], item[0]), reverse=True)
            first = next((i + 1 for i, (d, _) in enumerate(ranked[: max(K_VALUES)]) if d in relevant), None)
            for k in K_VALUES:
                row[f"mrr_at_{k}"] = 1.0 / first if first is not None and first <= k else 0.0
            confidences[q] = confidence(list(pending[q].values()))

    pending: dict[str, dict[str, float]] = {}
    for qid, hits in run:
        if qid in qrels:
            pending[qid] = dict(hits)
            if len(pending) >= chunk:
                evaluate(pending)
                pending = {}
    evaluate(pending)
    names = [f"{m}_at_{k}" for m in (*_PYTREC, "mrr") for k in K_VALUES]
    zero = dict.fromkeys(names, 0.0)
    queries = list(qrels)  # every judged query: one without hits counts 0
    table = {name: np.array([per_query.get(q, zero)[name] for q in queries]) for name in names}
    # MTEB rounds the pytrec_eval means to 5 decimals, not MRR's
    out = {name: float(values.sum()) / len(queries) for name, values in table.items()}
    out = {name: value if name.startswith("mrr") else round(value, 5) for name, value in out.items()}
    out["accuracy"] = out["recall_at_1"]
    conf = {c: np.array([confidences.get(q, confidence([]))[c] for q in queries]) for c in CONFIDENCES}
    for measure in _NAUC:
        for k in K_VALUES:
            for c in CONFIDENCES:
                out[f"nauc_{measure}_at_{k}_{c}"] = nauc(conf[c], table[f"{measure}_at_{k}"])
    out["main_score"] = out["ndcg_at_10"]
    return out
