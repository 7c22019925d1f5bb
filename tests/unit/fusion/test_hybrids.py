"""Hybrids: fused runs equal pyserini's fusion command line; settings checks; the stage's outputs."""

from __future__ import annotations

import runpy
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import jsonschema
import numpy as np
import pyarrow as pa
import pytest

from miracl_eval import schemas
from miracl_eval.config.hybrids import HYBRID_METHODS, HYBRID_SCHEMA, check_hybrid
from miracl_eval.errors import ConfigError, InputError
from miracl_eval.fusion.hybrids import fuse_runs, hybrid_stage
from miracl_eval.runs import read_run, write_run
from tests.helpers import REPO, rank_hits, read_trec

# Passage ids that look like numbers ("007" and "7" are different passages) and a qid-like one.
DOCIDS = ["1", "7", "007", "12", "10020#0", "10020#1", "d3", "d4", "2.5", "33"]
SCORES = [-1.0, 0.0, 0.25, 0.5, 0.5, 1.0, 1.0, 2.5, 3.0]  # few values: many ties, before and after fusion
# Query ids: in "mixed" every run has non-numeric qids beside numeric-looking ones; in "numeric" all look
# like integers (pyserini's reader then parses them as numbers, consistently across its input files).
QIDS = {"mixed": ["6", "10", "10020#0", "q-x", "q-y", "41"], "numeric": ["6", "10", "41", "5", "300", "8"]}


def random_runs(seed: int, n_runs: int, scenario: str) -> list[pa.Table]:
    rng = np.random.default_rng(seed)
    qids = QIDS[scenario]
    runs = []
    for i in range(n_runs):
        # each run lacks a different query, and the first query of the list is in every run
        present = [q for j, q in enumerate(qids) if j == 0 or (j + i) % len(qids) != 1]
        hits: dict[str, list[tuple[str, float]]] = {}
        for qid in present:
            n = int(rng.integers(1, 9))
            docids = [str(d) for d in rng.choice(DOCIDS, size=n, replace=False)]
            if qid == "10020#0" and qid not in docids:
                docids[0] = qid  # a passage whose id equals the query's
            hits[qid] = [(d, float(rng.choice(SCORES))) for d in docids]
        hits[qids[0]] = [(d, 1.0) for d in DOCIDS[:3]] if i == 0 else hits[qids[0]]  # one query of equal scores
        runs.append(rank_hits(hits))
    every = set.intersection(*(set(r.column("qid").to_pylist()) for r in runs))
    assert every != set(qids)  # some queries are missing from some runs
    return runs


def pyserini_cli(tmp_path: Path, runs: list[pa.Table], args: list[str]) -> pa.Table:
    """The fused run of ``python -m pyserini.fusion`` on TREC files written by our writer."""
    paths = []
    for i, run in enumerate(runs):
        paths.append(tmp_path / f"in{i}.trec")
        write_run(run, tmp_path / f"in{i}.parquet", paths[-1], tag=f"run{i}")
    out = tmp_path / "fused.trec"
    cmd = [sys.executable, "-m", "pyserini.fusion", "--runs", *map(str, paths), "--output", str(out), *args]
    subprocess.run(cmd, check=True, capture_output=True, text=True)
    return read_trec(out)


def by_query(table: pa.Table) -> dict[str, list[tuple[int, str, float]]]:
    out: dict[str, list[tuple[int, str, float]]] = {}
    for row in table.to_pylist():
        out.setdefault(row["qid"], []).append((row["rank"], row["docid"], row["score"]))
    return {q: sorted(hits) for q, hits in out.items()}


CASES = {
    "interpolation": (2, {"alpha": 0.3}, ["--alpha", "0.3"]),
    "rrf": (3, {"rrf_k": 7}, ["--rrf.k", "7"]),
    "normalize": (3, {}, []),
    "average": (3, {}, []),
}


@pytest.mark.parametrize("scenario", ["mixed", "numeric"])
@pytest.mark.parametrize("method", HYBRID_METHODS)
def test_fuse_runs_equals_the_pyserini_cli(tmp_path: Path, method: str, scenario: str) -> None:
    n_runs, kwargs, cli_args = CASES[method]
    runs = random_runs(HYBRID_METHODS.index(method), n_runs, scenario)
    depth, k = 4, 5  # shallower than the runs and than their union
    ours = fuse_runs(runs, method, depth=depth, k=k, **kwargs)
    theirs = pyserini_cli(tmp_path, runs, ["--method", method, "--depth", str(depth), "--k", str(k), *cli_args])
    assert ours.schema == schemas.RUN
    mine, cli = by_query(ours), by_query(theirs)
    assert set(mine) == set(cli) == set().union(*(r.column("qid").to_pylist() for r in runs))
    for qid in cli:
        assert [(r, d) for r, d, _ in mine[qid]] == [(r, d) for r, d, _ in cli[qid]], qid
        assert [s for *_, s in mine[qid]] == pytest.approx([s for *_, s in cli[qid]], abs=1e-9, rel=0)
    assert max(len(h) for h in mine.values()) == k
    # ties really occur among the fused scores, so their order (docid ascending) was compared
    assert any(len({s for *_, s in hits}) < len(hits) for hits in mine.values())


def test_interpolation_semantics_by_hand() -> None:
    a = rank_hits({"q": [("d1", 4.0), ("q", 2.0)], "only-a": [("x", 8.0)]})
    b = rank_hits({"q": [("q", 10.0), ("d2", 1.0)]})
    fused = fuse_runs([a, b], "interpolation", alpha=0.25)
    # q: 0.25*2 + 0.75*10 = 8; d1: 0.25*4 (no score in b adds nothing) = 1; d2: 0.75*1; only-a: 0.25*8
    assert by_query(fused) == {
        "only-a": [(1, "x", 2.0)],
        "q": [(1, "q", 8.0), (2, "d1", 1.0), (3, "d2", 0.75)],
    }
    assert by_query(fuse_runs([a, b], "interpolation", alpha=0.25, k=2))["q"] == [(1, "q", 8.0), (2, "d1", 1.0)]
    # depth 1: a's d1 and b's q only
    assert by_query(fuse_runs([a, b], "interpolation", alpha=0.25, depth=1))["q"] == [(1, "q", 7.5), (2, "d1", 1.0)]


def test_rrf_ties_are_ordered_by_docid() -> None:
    a = rank_hits({"q": [("b", 2.0), ("a", 1.0)]})
    b = rank_hits({"q": [("a", 2.0), ("b", 1.0)]})
    fused = by_query(fuse_runs([a, b], "rrf"))
    assert [(r, d) for r, d, _ in fused["q"]] == [(1, "a"), (2, "b")]
    assert fused["q"][0][2] == pytest.approx(1 / 61 + 1 / 62)


def test_fuse_runs_rejects_bad_calls() -> None:
    run = rank_hits({"q": [("d", 1.0)]})
    with pytest.raises(ValueError, match="exactly two"):
        fuse_runs([run, run, run], "interpolation")
    with pytest.raises(ValueError, match="at least two"):
        fuse_runs([run], "rrf")
    with pytest.raises(ValueError, match="unknown fusion method"):
        fuse_runs([run, run], "max")


# --------------------------------------------------------------------------- settings


def test_schema_is_valid_and_documented() -> None:
    jsonschema.Draft202012Validator.check_schema(HYBRID_SCHEMA)
    assert set(HYBRID_SCHEMA["properties"]) == {"systems", "method", "alpha", "rrf_k", "depth", "k"}
    assert all(prop.get("description") for prop in HYBRID_SCHEMA["properties"].values())
    assert HYBRID_SCHEMA["properties"]["method"]["enum"] == list(HYBRID_METHODS)


@pytest.mark.parametrize(
    "settings",
    [
        {"systems": ["bm25", "me5-large/dense"]},
        {"systems": ["bm25", "me5-large/dense"], "method": "interpolation", "alpha": 0.0},
        {"systems": ["a", "b", "c"], "method": "rrf", "rrf_k": 10, "depth": 100, "k": 10},
        {"systems": ["a", "b", "c"], "method": "normalize", "alpha": 0.5, "rrf_k": 60},  # defaults filled in
    ],
)
def test_check_hybrid_accepts(settings: dict[str, Any]) -> None:
    check_hybrid("h", settings)


@pytest.mark.parametrize(
    ("settings", "key", "message"),
    [
        ({}, "hybrids.h.systems", "required"),
        ({"systems": ["bm25"]}, "hybrids.h.systems", "too short"),
        ({"systems": ["bm25", "bm25"]}, "hybrids.h.systems", "non-unique"),
        ({"systems": ["a", ""]}, "hybrids.h.systems.1", "non-empty"),
        ({"systems": ["a", "b"], "method": "max"}, "hybrids.h.method", "is not one of"),
        ({"systems": ["a", "b"], "method": "interpolation", "alpha": 1.5}, "hybrids.h.alpha", "maximum"),
        ({"systems": ["a", "b"], "rrf_k": 0}, "hybrids.h.rrf_k", "minimum"),
        ({"systems": ["a", "b"], "depth": 2.5}, "hybrids.h.depth", "not of type 'integer'"),
        ({"systems": ["a", "b"], "k": "10"}, "hybrids.h.k", "not of type 'integer'"),
        ({"systems": ["a", "b"], "weights": [1, 2]}, "hybrids.h", "'weights' was unexpected"),
        ({"systems": ["a", "b", "c"], "method": "interpolation"}, "hybrids.h.systems", "exactly two systems, found 3"),
        ({"systems": ["a", "h"]}, "hybrids.h.systems", "its own run"),
        ({"systems": ["a", "b"], "method": "rrf", "alpha": 0.3}, "hybrids.h.alpha", "interpolation only"),
        ({"systems": ["a", "b"], "method": "interpolation", "rrf_k": 10}, "hybrids.h.rrf_k", "rrf only"),
    ],
)
def test_check_hybrid_errors_name_the_key(settings: dict[str, Any], key: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message) as err:
        check_hybrid("h", settings)
    assert err.value.key == key


# --------------------------------------------------------------------------- stage


def write_inputs(tmp_path: Path, runs: list[pa.Table]) -> list[Path]:
    paths = []
    for i, run in enumerate(runs):
        paths.append(tmp_path / "in" / f"run{i}.parquet")
        write_run(run, paths[-1], tmp_path / "in" / f"run{i}.trec", tag=f"run{i}")
    return paths


def test_hybrid_stage_writes_parquet_and_trec(tmp_path: Path) -> None:
    runs = random_runs(7, 3, "mixed")
    paths = write_inputs(tmp_path, runs)
    out = tmp_path / "out"
    settings = {"systems": ["a", "b", "c"], "depth": 6, "k": 4}  # method: the default, rrf
    summary = hybrid_stage(paths, out / "h.parquet", out / "h.trec", "bm25+me5", settings)
    expected = fuse_runs(runs, "rrf", depth=6, k=4)
    assert read_run(out / "h.parquet").equals(expected)
    assert read_trec(out / "h.trec").equals(expected)
    assert (out / "h.trec").read_text().split("\n")[0].endswith(" bm25+me5")
    assert summary == {"method": "rrf", "systems": ["a", "b", "c"], "queries": 6, "hits": len(expected)}
    assert sorted(p.name for p in out.iterdir()) == ["h.parquet", "h.trec"]


def test_hybrid_stage_leaves_nothing_partial(tmp_path: Path) -> None:
    paths = write_inputs(tmp_path, random_runs(8, 2, "mixed"))
    out = tmp_path / "out"
    out.mkdir()
    (out / "h.parquet").write_bytes(b"old")
    with pytest.raises(ValueError, match="run tag"):  # fails while writing (a tag must be one word)
        hybrid_stage(paths, out / "h.parquet", out / "h.trec", "bad tag", {"systems": ["a", "b"]})
    assert sorted(p.name for p in out.iterdir()) == ["h.parquet"]
    assert (out / "h.parquet").read_bytes() == b"old"


def test_hybrid_stage_input_errors(tmp_path: Path) -> None:
    good = rank_hits({"q": [("d1", 1.0)]})
    dup = pa.table({"qid": ["q", "q"], "docid": ["d1", "d1"], "rank": [1, 2], "score": [2.0, 1.0]}, schemas.RUN)
    paths = write_inputs(tmp_path, [good, dup])
    out = tmp_path / "out"
    with pytest.raises(InputError, match="'d1' occurs more than once for query 'q'") as err:
        hybrid_stage(paths, out / "h.parquet", out / "h.trec", "h", {"systems": ["a", "b"]})
    assert err.value.path == str(paths[1])
    with pytest.raises(ValueError, match="2 run files for the 3 systems"):
        hybrid_stage(paths, out / "h.parquet", out / "h.trec", "h", {"systems": ["a", "b", "c"]})
    assert not out.exists()


class Named(list):
    """A list with named items, as Snakemake's ``input``/``output``/``log``."""

    def __init__(self, items: list[Any], **named: Any) -> None:
        super().__init__(items)
        self.__dict__.update(named)

    def items(self) -> list[tuple[str, Any]]:
        return [(k, v) for k, v in self.__dict__.items()]


def test_script_calls_the_stage(tmp_path: Path) -> None:
    runs = random_runs(9, 2, "numeric")
    paths = write_inputs(tmp_path, runs)
    out = tmp_path / "out"
    settings = {"systems": ["bm25", "me5-large/dense"], "method": "interpolation", "alpha": 0.7, "depth": 3, "k": 4}
    sm = SimpleNamespace(
        scriptdir=str(REPO / "scripts"),
        input=Named([str(p) for p in paths]),
        output=Named(
            [str(out / "h.parquet"), str(out / "h.trec")], run=str(out / "h.parquet"), trec=str(out / "h.trec")
        ),
        log=Named([str(tmp_path / "h.log")]),
        params=Named([], settings=settings, tag="bm25+me5-large"),
        wildcards=Named([], hybrid="bm25+me5-large"),
        rule="hybrid",
        config={"preload": False},
    )
    runpy.run_path(str(REPO / "scripts" / "hybrid.py"), init_globals={"snakemake": sm})
    assert read_run(out / "h.parquet").equals(fuse_runs(runs, "interpolation", alpha=0.7, depth=3, k=4))
    assert (out / "h.trec").read_text().split("\n")[0].endswith(" bm25+me5-large")
