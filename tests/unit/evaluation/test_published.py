"""Published numbers: shipped data, loader, configuration matching and the side-by-side table."""

from __future__ import annotations

import csv
import statistics
from decimal import Decimal
from pathlib import Path

import pytest
import yaml

from miracl_eval.errors import InputError
from miracl_eval.evaluation import published
from miracl_eval.inputs.datasets import MIRACL_LANGUAGES
from tests.helpers import PYSERINI_2CR, run_config

DATA = published.data_dir()
M3_METHODS = ("bm25", "bge-m3/dense", "bge-m3/sparse", "bge-m3/multivec", "bge-m3/dense+sparse", "bge-m3/all")


def m3_run(bm25: dict | None = None, **settings: object) -> dict:
    """A validated full-MIRACL run config with every BGE-M3 row; ``settings`` override bge-m3's."""
    return run_config(
        {
            "languages": list(MIRACL_LANGUAGES),
            "models": {"bge-m3": settings},
            "methods": list(M3_METHODS),
            **({"bm25": bm25} if bm25 else {}),
        }
    )


M3_CONFIG = m3_run()


def tsv_rows(name: str) -> list[dict[str, str]]:
    lines = [ln for ln in DATA.joinpath(name).read_text(encoding="utf-8").splitlines() if not ln.startswith("#")]
    return list(csv.DictReader(lines, delimiter="\t"))


def test_files_and_sources_are_shipped() -> None:
    for name in (*published.FILES, "SOURCES.md"):
        assert DATA.joinpath(name).is_file(), name
    sources = DATA.joinpath("SOURCES.md").read_text(encoding="utf-8")
    ids = {r.source_id for r in published.load_published()}
    assert ids == {
        "bge-m3-table1", "bge-m3-table11", "pyserini-1.6.0-2cr", "pyserini-1.6.0-2cr-dense", "pyserini-1.6.0-2cr-hybrid",
        "pyserini-2.4.0-2cr", "pyserini-2.4.0-2cr-dense", "pyserini-2.4.0-2cr-hybrid", "mteb-results-hn", "mteb-results-hn-v2",
        "mteb-results", "messirve-v1.0-notebook", "messirve-v1.0-figure3", "flagembedding-rerankers",
    }  # fmt: skip
    for needle in ("arXiv:2402.03216", "Table 1", "Table 11", "2cr/miracl.yaml", "1.6.0", "arXiv:2409.05994",
                   "miracl-bge-m3.png"):  # fmt: skip
        assert needle in sources


def test_loader_reads_every_line_exactly() -> None:
    rows = published.load_published()
    by_file = sum(len(tsv_rows(n)) for n in published.FILES)
    assert len(rows) == by_file
    for name in published.FILES:
        for raw in tsv_rows(name):
            match = [
                r
                for r in rows
                if (r.source_id, r.system, r.partition, r.measure)
                == (raw["source_id"], raw["system"], raw["partition"], raw["measure"])
            ]
            assert len(match) == 1
            row = match[0]
            assert row.text == raw["value"]
            assert row.value == float(Decimal(raw["value"]) / Decimal(raw["scale"]))


def test_bge_m3_table_is_complete() -> None:
    rows = [r for r in published.load_published() if r.source_id == "bge-m3-table1"]
    systems = {r.system for r in rows}
    for name in ("BM25 (XLM-R tokenizer)", "mDPR", "mContriever", "mE5-large", "E5-mistral-7b"):
        assert name in systems
    for m3 in ("Dense", "Sparse", "Multi-vec", "Dense+Sparse", "All"):
        assert f"M3-Embedding {m3}" in systems
    for system in systems - {"OpenAI-3 (text-embedding-3-large)"}:
        parts = {r.partition: Decimal(r.text) for r in rows if r.system == system}
        assert set(parts) == {"mean", *MIRACL_LANGUAGES}, system
        # the printed Avg is the mean of the 18 printed languages, within rounding
        mean = sum(parts[lang] for lang in MIRACL_LANGUAGES) / 18
        assert abs(mean - parts["mean"]) <= Decimal("0.1"), system
    # spot checks against the paper (corrected Table 1)
    value = {(r.system, r.partition): r.text for r in rows}
    assert value[("M3-Embedding Dense", "mean")] == "69.2"
    assert value[("M3-Embedding All", "mean")] == "71.5"
    assert value[("M3-Embedding Sparse", "yo")] == "70.0"
    assert value[("BM25 (XLM-R tokenizer)", "es")] == "7.7"


def test_pyserini_numbers_match_the_installed_yaml() -> None:
    import pyserini

    spec = yaml.safe_load((Path(pyserini.__file__).parent / "2cr" / "miracl.yaml").read_text())
    expected = {}
    for cond in spec["conditions"]:
        if cond["name"].startswith("bm25."):
            dev = next(s for s in cond["splits"] if s["split"] == "dev")["scores"][0]
            expected[cond["name"].split(".", 1)[1]] = dev
    rows = [r for r in published.load_published() if r.source_id == PYSERINI_2CR]
    assert {r.partition for r in rows} == set(MIRACL_LANGUAGES) == set(expected)
    for r in rows:
        assert r.value == expected[r.partition][r.measure]
    # Table 11 of the BGE-M3 paper (BM25 with Lucene analyzer, 38.5) is pyserini 1.6.0's average (Lucene 9's
    # analyzers); 2.3.0's new fa and ko analyzers moved it to 0.38809
    means = {
        release: statistics.mean(
            r.value for r in published.load_published([f"pyserini_{release}_miracl_bm25.tsv"]) if r.measure == "nDCG@10"
        )
        for release in ("1.6.0", "2.4.0")
    }
    assert round(means["1.6.0"] * 100, 1) == 38.5 and round(means["1.6.0"], 5) == 0.38488
    assert round(means["2.4.0"], 5) == 0.38809


def test_side_by_side_bge_m3_dense_matches_shipped_numbers(tmp_path: Path) -> None:
    rows = published.load_published()
    ours = {"bge-m3/dense": {lang: 0.5 + i / 100 for i, lang in enumerate(MIRACL_LANGUAGES)}}
    table = published.side_by_side(ours, "miracl", "dev", "nDCG@10", M3_CONFIG)
    got = {(t["source_id"], t["partition"]): t for t in table}
    expected = {r.partition: r for r in rows if r.system == "M3-Embedding Dense"}
    assert set(got) == {("bge-m3-table1", p) for p in expected}
    for part, r in expected.items():
        t = got[("bge-m3-table1", part)]
        mine = sum(ours["bge-m3/dense"].values()) / 18 if part == "mean" else ours["bge-m3/dense"][part]
        assert t["theirs"] == float(Decimal(r.text) / 100)
        assert t["ours"] == pytest.approx(mine, abs=1e-15)
        assert t["diff"] == t["ours"] - t["theirs"]
        assert t["published"] == r.text and t["scale"] == 100
    # the TSV round-trips: values read back equal the shipped numbers, diff = ours − theirs
    out = tmp_path / "side.tsv"
    published.write_side_by_side(table, out)
    back = list(csv.DictReader(out.read_text(encoding="utf-8").splitlines(), delimiter="\t"))
    assert len(back) == len(table)
    for line in back:
        r = expected[line["partition"]]
        assert float(line["theirs"]) == float(Decimal(r.text) / 100)
        assert Decimal(line["published"]) == Decimal(r.text)
        assert float(line["diff"]) == float(line["ours"]) - float(line["theirs"])


def test_side_by_side_bm25_uses_pyserini_and_table11_not_the_xlmr_row() -> None:
    rows = published.load_published()
    ours = {
        "bm25": {r.partition: r.value - 0.01 for r in rows if r.source_id == PYSERINI_2CR and r.measure == "nDCG@10"}
    }
    table = published.side_by_side(ours, "miracl", "dev", "nDCG@10", M3_CONFIG)
    sources = {t["source_id"] for t in table}
    assert sources == {PYSERINI_2CR, "bge-m3-table11"}  # never the XLM-R tokenizer BM25
    for t in table:
        if t["source_id"] == PYSERINI_2CR:
            assert t["diff"] == pytest.approx(-0.01, abs=1e-12)
        else:
            assert t["partition"] == "mean" and t["theirs"] == 0.385
    # R@100 only has pyserini numbers
    r100 = {r.partition: r.value for r in rows if r.source_id == PYSERINI_2CR and r.measure == "R@100"}
    table = published.side_by_side({"bm25": r100}, "miracl", "dev", "R@100", M3_CONFIG)
    assert len(table) == 18 and all(t["diff"] == 0.0 for t in table)


def test_side_by_side_requires_matching_configuration() -> None:
    ours = {m: {"sw": 0.7} for m in M3_METHODS}
    full = published.side_by_side(ours, "miracl", "dev", "nDCG@10", M3_CONFIG)
    assert {t["method"] for t in full} == set(M3_METHODS)
    # another checkpoint: no M3 rows
    other = published.side_by_side(ours, "miracl", "dev", "nDCG@10", m3_run(checkpoint="my/finetuned-m3"))
    assert {t["method"] for t in other} == {"bm25"}
    # another sparse weight: dense+sparse and all are not comparable, the others still are
    w = published.side_by_side(ours, "miracl", "dev", "nDCG@10", m3_run(weights={"sparse": 0.5}))
    assert {t["method"] for t in w} == {"bge-m3/dense", "bge-m3/sparse", "bge-m3/multivec", "bm25"}
    # another rerank depth: multivec and all are not comparable
    d = published.side_by_side(ours, "miracl", "dev", "nDCG@10", m3_run(rerank_depth=100))
    assert {t["method"] for t in d} == {"bge-m3/dense", "bge-m3/sparse", "bge-m3/dense+sparse", "bm25"}
    # other BM25 parameters: not pyserini's
    b = published.side_by_side({"bm25": {"sw": 0.4}}, "miracl", "dev", "nDCG@10", m3_run(bm25={"k1": 1.2, "b": 0.75}))
    assert b == []
    # wrong split or dataset: nothing
    assert published.side_by_side(ours, "miracl", "train", "nDCG@10", M3_CONFIG) == []
    assert published.side_by_side(ours, "messirve", "test", "nDCG@10", M3_CONFIG) == []
    # a mean needs every language (or an explicit mean)
    dense = "bge-m3/dense"
    partial = published.side_by_side({dense: {"sw": 0.7, "yo": 0.8}}, "miracl", "dev", "nDCG@10", M3_CONFIG)
    assert {t["partition"] for t in partial} == {"sw", "yo"}
    explicit = published.side_by_side({dense: {"mean": 0.7}}, "miracl", "dev", "nDCG@10", M3_CONFIG)
    assert [(t["partition"], t["theirs"]) for t in explicit] == [("mean", 0.692)]


def test_published_rows_follow_the_checkpoint_not_the_models_name() -> None:
    """A model named otherwise but with BGE-M3's checkpoint and settings is compared; the preset's
    name with another checkpoint is not."""
    cfg = run_config(
        {
            "languages": ["sw"],
            "models": {"m3-copy": {"family": "bge-m3", "checkpoint": "BAAI/bge-m3"}, "bge-m3": {"checkpoint": "/x"}},
            "methods": ["m3-copy/all", "bge-m3/all"],
        }
    )
    ours = {"m3-copy/all": {"sw": 0.7}, "bge-m3/all": {"sw": 0.7}}
    assert {t["method"] for t in published.side_by_side(ours, "miracl", "dev", "nDCG@10", cfg)} == {"m3-copy/all"}


def test_mismatch_explains() -> None:
    row = next(r for r in published.load_published() if r.system == "M3-Embedding All" and r.partition == "sw")
    assert published.mismatch(row, published.row_facts(M3_CONFIG, "bge-m3/all")) is None
    assert "model.weights.sparse" in published.mismatch(
        row, published.row_facts(m3_run(weights={"sparse": 0.2}), "bge-m3/all")
    )
    assert "model" in published.mismatch(row, published.row_facts(m3_run(checkpoint="x"), "bge-m3/all"))
    assert "method dense is not all" in published.mismatch(row, published.row_facts(M3_CONFIG, "bge-m3/dense"))
    xlmr = next(r for r in published.load_published() if r.system == "BM25 (XLM-R tokenizer)" and r.partition == "sw")
    assert "bm25.tokenizer" in published.mismatch(xlmr, published.row_facts(M3_CONFIG, "bm25"))


def test_side_by_side_messirve_bm25() -> None:
    cfg = run_config(
        {
            "dataset": "messirve",
            "languages": ["full", "ar"],
            "models": {"bge-m3": {}},
            "methods": ["bm25", "bge-m3/dense"],
        }
    )
    table = published.side_by_side({"bm25": {"full": 0.2, "ar": 0.3}}, "messirve", "test", "nDCG@10", cfg)
    assert [(t["partition"], t["theirs"], t["published"]) for t in table] == [
        ("full", 0.1785, "0.1785"),
        ("ar", 0.1745, "0.1745"),
    ]
    assert table[0]["diff"] == 0.2 - 0.1785
    # the source has no BGE-M3 row
    assert published.side_by_side({"bge-m3/dense": {"full": 0.5}}, "messirve", "test", "nDCG@10", cfg) == []


def test_parse_errors_name_file_and_line() -> None:
    head = "\t".join(published.COLUMNS)
    good = "miracl\tdev\ts\tX\tbm25\t-\tsw\tnDCG@10\t40.1\t100\t-"
    assert published.parse_published(f"# c\n{head}\n{good}\n", "f.tsv")[0].value == 0.401
    with pytest.raises(InputError, match=r"f.tsv, line 2: value 'x'"):
        published.parse_published(f"{head}\n{good.replace('40.1', 'x')}\n", "f.tsv")
    with pytest.raises(InputError, match="outside"):
        published.parse_published(f"{head}\n{good.replace('40.1', '140.1')}\n", "f.tsv")
    with pytest.raises(InputError, match="scale"):
        published.parse_published(f"{head}\n{good.replace('100', '10')}\n", "f.tsv")
    with pytest.raises(InputError, match="header"):
        published.parse_published(f"{good}\n", "f.tsv")
    with pytest.raises(InputError, match="key=value"):
        published.parse_published(f"{head}\n{good[:-1]}fusion.sparse\n", "f.tsv")
    with pytest.raises(InputError, match="unknown method"):
        published.parse_published(f"{head}\n{good.replace('bm25', 'splade')}\n", "f.tsv")


def test_read_results_table_round_trip(tmp_path: Path) -> None:
    from miracl_eval.evaluation.metrics import format_table

    values = {"bm25": {"sw": 0.38, "yo": 0.41}, "bge-m3/dense": {"sw": 0.79, "yo": 0.82}}
    path = tmp_path / "miracl_ndcg.tsv"
    path.write_text(format_table(values, ["bm25", "bge-m3/dense"], ["sw", "yo"]), encoding="utf-8")
    back = published.read_results_table(path)
    assert back["bm25"]["sw"] == 0.38 and back["bge-m3/dense"]["mean"] == pytest.approx(0.805)
    table = published.side_by_side(back, "miracl", "dev", "nDCG@10", M3_CONFIG)
    # the table's mean is over sw and yo only: never compared with a published 18-language mean
    assert {(t["method"], t["partition"]) for t in table} == {
        (m, p) for m in ("bm25", "bge-m3/dense") for p in ("sw", "yo")
    }
    bad = tmp_path / "bad.tsv"
    bad.write_text("x\ty\n", encoding="utf-8")
    with pytest.raises(InputError, match="not a results table"):
        published.read_results_table(bad)


def test_me5_large_rows_are_compared_only_with_that_checkpoint_and_settings() -> None:
    def me5_rows(**settings: object) -> set[str]:
        cfg = run_config(
            {"languages": list(MIRACL_LANGUAGES), "models": {"me5-large": settings}, "methods": ["me5-large/dense"]}
        )
        table = published.side_by_side({"me5-large/dense": {"sw": 0.7}}, "miracl", "dev", "nDCG@10", cfg)
        return {str(t["system"]) for t in table}

    assert me5_rows() == {"mE5-large"}  # the preset: checkpoint, mean pooling, normalised, prefixes
    assert me5_rows(query_max_length=128) == {"mE5-large"}  # a length is not a setting the source states
    assert me5_rows(query_prefix="") == set()
    assert me5_rows(pooling="cls") == set()
    assert me5_rows(checkpoint="intfloat/multilingual-e5-base") == set()


def test_openai_rows_are_compared_only_with_openais_own_full_size_model() -> None:
    """BGE-M3 Table 1's OpenAI-3 mean and MessIRve's text-embedding-3-large: OpenAI's API, full dimension."""

    def rows(dataset: str, languages: list[str], **settings: object) -> set[str]:
        cfg = run_config({"dataset": dataset, "languages": languages, "models": {"openai-3-large": settings},
                        "methods": ["openai-3-large/dense"]})  # fmt: skip
        ours = {"openai-3-large/dense": dict.fromkeys(languages, 0.5)}
        split = "dev" if dataset == "miracl" else "test"
        measure = "nDCG@10"
        return {str(t["system"]) for t in published.side_by_side(ours, dataset, split, measure, cfg)}

    assert rows("miracl", list(MIRACL_LANGUAGES)) == {"OpenAI-3 (text-embedding-3-large)"}
    assert rows("messirve", ["full"]) == {"OpenAI-large"}  # MessIRve's Figure 3 label
    assert rows("miracl", list(MIRACL_LANGUAGES), dimensions=256) == set()
    assert rows("miracl", list(MIRACL_LANGUAGES), base_url="http://127.0.0.1:8000/v1") == set()  # a local server
    assert rows("miracl", list(MIRACL_LANGUAGES), model="text-embedding-3-small") == set()


def test_pyserini_hybrid_rows_need_bm25_first_and_its_interpolation() -> None:
    def hybrid_rows(systems: list[str], **settings: object) -> set[str]:
        cfg = run_config(
            {
                "languages": list(MIRACL_LANGUAGES),
                "models": {"mdpr": {}},
                "methods": ["bm25", "mdpr/dense", "h"],
                "hybrids": {"h": {"systems": systems, "method": "interpolation", **settings}},
            }
        )
        table = published.side_by_side({"h": {"sw": 0.7}}, "miracl", "dev", "nDCG@10", cfg)
        return {str(t["source_id"]) for t in table}

    assert hybrid_rows(["bm25", "mdpr/dense"]) == {f"{PYSERINI_2CR}-hybrid"}
    assert hybrid_rows(["mdpr/dense", "bm25"]) == set()
    assert hybrid_rows(["bm25", "mdpr/dense"], alpha=0.3) == set()


def _reranked_run(methods: list[str], **reranker: object) -> dict:
    return run_config({"languages": list(MIRACL_LANGUAGES), "models": {"bge-m3": {}},
                     "rerankers": {"bge-reranker-v2-m3": reranker, "bge-reranker-v2-gemma": {}}, "methods": methods})  # fmt: skip


def test_flagembedding_reranker_rows_need_bge_m3_dense_first_depth_100_and_1024_tokens() -> None:
    rows = tsv_rows("flagembedding_miracl_rerankers.tsv")
    assert len(rows) == 3 * 19
    for system in ("bge-reranker-v2-m3", "bge-reranker-v2-gemma", "bge-m3 (first stage, 512+512)"):
        values = {r["partition"]: Decimal(r["value"]) for r in rows if r["system"] == system}
        assert set(values) == {*MIRACL_LANGUAGES, "mean"}
        assert abs(sum(v for p, v in values.items() if p != "mean") / 18 - values["mean"]) <= Decimal("0.005")
    assert {r["value"] for r in rows if r["partition"] == "yo" and r["system"].startswith("bge-m3")} == {"60.7"}
    label = "bge-m3/dense>>bge-reranker-v2-m3"
    ours = {label: dict.fromkeys(MIRACL_LANGUAGES, 0.7), "bge-m3/dense": dict.fromkeys(MIRACL_LANGUAGES, 0.7)}
    cfg = _reranked_run(["bge-m3/dense", label])
    table = published.side_by_side(ours, "miracl", "dev", "nDCG@10", cfg)
    mine = [t for t in table if t["method"] == label]
    assert {t["system"] for t in mine} == {"bge-reranker-v2-m3"} and len(mine) == 19
    yo = next(t for t in mine if t["partition"] == "yo")
    assert yo["published"] == "64.03" and abs(yo["diff"] - (0.7 - 0.6403)) < 1e-12
    assert "before the BGE-M3 paper's correction" in yo["note"] and "our first stage: bge-m3/dense" in yo["note"]
    # the source's first stage is never ours: our dense row meets only the paper's corrected numbers
    assert {t["source_id"] for t in table if t["method"] == "bge-m3/dense"} == {"bge-m3-table1"}
    # another depth, another max length, another first stage: not comparable
    for cfg, rows_ in (
        (_reranked_run([label], depth=50), {label: ours[label]}),
        (_reranked_run([label], max_length=512), {label: ours[label]}),
        (_reranked_run(["bm25>>bge-reranker-v2-m3"]), {"bm25>>bge-reranker-v2-m3": ours[label]}),
        (_reranked_run(["bge-m3/sparse>>bge-reranker-v2-m3"]), {"bge-m3/sparse>>bge-reranker-v2-m3": ours[label]}),
    ):
        assert published.side_by_side(rows_, "miracl", "dev", "nDCG@10", cfg) == []
    gemma = "bge-m3/dense>>bge-reranker-v2-gemma"
    cfg = _reranked_run([gemma])
    got = published.side_by_side({gemma: ours[label]}, "miracl", "dev", "nDCG@10", cfg)
    assert {t["system"] for t in got} == {"bge-reranker-v2-gemma"} and len(got) == 19
