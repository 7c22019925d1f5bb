"""Published numbers only beside comparable runs: the check on counts and fingerprints, the shipped
reference sizes against the real MIRACL dev files, and a BM25-only sample run."""

from __future__ import annotations

import dataclasses
import os
import random
from pathlib import Path

import pyarrow as pa

from miracl_eval import schemas
from miracl_eval.evaluation import comparability, published
from miracl_eval.evaluation.comparability import FULL_DATA, Observed, compare, references
from miracl_eval.inputs.datasets import MESSIRVE, MIRACL_LANGUAGES
from miracl_eval.inputs.preprocess import build_topics
from miracl_eval.tsv import format_tsv, read_tsv
from tests.helpers import PYSERINI_2CR, run_config

# MIRACL v1.0 (paper, Table 1; de and yo: MTEB's statistics): passages and dev queries, typed from the sources
PASSAGES = {
    "ar": 2_061_414, "bn": 297_265, "en": 32_893_221, "es": 10_373_953, "fa": 2_207_172, "fi": 1_883_509,
    "fr": 14_636_953, "hi": 506_264, "id": 1_446_315, "ja": 6_953_614, "ko": 1_486_752, "ru": 9_543_918,
    "sw": 131_924, "te": 518_079, "th": 542_166, "zh": 4_934_368, "de": 15_866_222, "yo": 49_043,
}  # fmt: skip
DEV_QUERIES = {
    "ar": 2896, "bn": 411, "en": 799, "es": 648, "fa": 632, "fi": 1271, "fr": 343, "hi": 350, "id": 960,
    "ja": 860, "ko": 213, "ru": 1252, "sw": 482, "te": 828, "th": 733, "zh": 393, "de": 305, "yo": 119,
}  # fmt: skip


def miracl_refs() -> dict[str, comparability.Reference]:
    refs = references("miracl", "dev", {p: p for p in MIRACL_LANGUAGES})
    assert all(len(r) == 1 for r in refs.values())
    return {p: r[0] for p, r in refs.items()}


def full(ref: comparability.Reference, **changes: object) -> Observed:
    """An observation with exactly the reference's sizes and fingerprints, but ``changes``."""
    obs = Observed(
        partition=ref.partition,
        corpus=ref.corpus,
        version=ref.version,
        passages=ref.passages or 0,
        queries=ref.queries,
        judgements=ref.judgements or 0,
        qids_sha256=ref.qids_sha256 or "",
        qrels_sha256=ref.qrels_sha256 or "",
        relevant=ref.relevant or 0,
        judged_passages=ref.judged_passages or 0,
    )
    return dataclasses.replace(obs, **changes)


# =========================================================================== the check, on counts


def test_shipped_sizes_are_the_published_counts() -> None:
    refs = miracl_refs()
    assert set(refs) == set(MIRACL_LANGUAGES)
    assert {p: r.passages for p, r in refs.items()} == PASSAGES
    assert {p: r.queries for p, r in refs.items()} == DEV_QUERIES and sum(DEV_QUERIES.values()) == 13_495
    assert all(r.version == "v1.0" and r.qids_sha256 and r.qrels_sha256 for r in refs.values())
    mess = {p: r[0] for p, r in references("messirve", "test", {p: "eswiki" for p in MESSIRVE.partitions}).items()}
    assert set(mess) == set(MESSIRVE.partitions)
    assert (mess["full"].queries, mess["ar"].queries, mess["full"].passages) == (156_528, 5_481, 14_047_759)
    assert {r.version for r in mess.values()} == {"v1.0"} and mess["ar"].judgements is None


def test_the_full_data_is_comparable() -> None:
    for ref in miracl_refs().values():
        result = compare(full(ref), ref)
        assert result.comparable and result.reason == FULL_DATA
        assert result.row()["comparable"] == "yes" and result.row()["qids_fingerprint"] == "match"


def test_a_sample_is_not_comparable_and_says_why() -> None:
    ar = miracl_refs()["ar"]
    result = compare(full(ar, passages=24, queries=4, judgements=12, qids_sha256="x", qrels_sha256="y"), ar)
    assert not result.comparable
    assert result.reason == "24 of 2,061,414 passages; 4 of 2,896 queries; 12 of 29,197 judgements"
    assert result.row()["qids_fingerprint"] == "differs"


def test_a_corpus_short_of_one_passage_is_not_comparable() -> None:
    # a missing shard or a truncated download, everything else intact
    sw = miracl_refs()["sw"]
    result = compare(full(sw, passages=131_923), sw)
    assert (result.comparable, result.reason) == (False, "131,923 of 131,924 passages")
    more = compare(full(sw, passages=131_925), sw)
    assert (more.comparable, more.reason) == (False, "131,925 passages, the full corpus has 131,924")


def test_a_missing_query_or_a_changed_judgement_is_not_comparable() -> None:
    yo = miracl_refs()["yo"]
    missing = compare(full(yo, queries=118, judgements=1178, qids_sha256="other", qrels_sha256="other"), yo)
    assert (missing.comparable, missing.reason) == (False, "118 of 119 queries; 1,178 of 1,188 judgements")
    fewer = compare(full(yo, judgements=1178, relevant=140, judged_passages=930, qrels_sha256="other"), yo)
    assert fewer.reason == "1,178 of 1,188 judgements"  # the judgements say it; their parts are not repeated
    flipped = compare(full(yo, relevant=143, qrels_sha256="0" * 64), yo)  # same lines, one made non-relevant
    assert flipped.reason == "143 of 144 relevant judgements; the judgements differ from the full qrels'"
    changed = compare(full(yo, qrels_sha256="0" * 64), yo)  # same counts, one relevance flipped
    assert (changed.comparable, changed.reason) == (False, "the judgements differ from the full qrels'")
    assert changed.row()["qrels_fingerprint"] == "differs" and changed.row()["qids_fingerprint"] == "match"
    renamed = compare(full(yo, qids_sha256="1" * 64), yo)
    assert (renamed.comparable, renamed.reason) == (False, "the query ids differ from the full topics'")


def test_relevant_judgements_and_judged_passages_are_checked_where_only_they_are_known() -> None:
    """MTEB publishes relevant judgements and judged passages but no qrels lines: a qrels download that
    lost lines, or whose relevance changed, is still caught."""
    refs = references("miracl-hn", "dev", {"ar": "ar", "sw": "sw"})
    (sw,) = refs["sw"]
    assert (sw.judgements, sw.relevant, sw.judged_passages, sw.qrels_sha256) == (None, 910, 3514, None)
    assert compare(full(sw, judgements=5_092), sw).comparable  # any number of lines, the statistics equal
    flipped = compare(full(sw, relevant=909), sw)
    assert (flipped.comparable, flipped.reason) == (False, "909 of 910 relevant judgements")
    lost = compare(full(sw, relevant=905, judged_passages=3_500), sw)
    assert lost.reason == "905 of 910 relevant judgements; 3,500 of 3,514 judged passages"
    assert lost.row()["full_judgements"] == "-" and lost.row()["full_relevant"] == 910
    (ar,) = refs["ar"]  # a sampled language: MTEB's 1,000 of MIRACL's 2,896 queries
    assert (ar.queries, ar.relevant, ar.judged_passages) == (1_000, 1_982, 9_560)


def test_messirve_counts_and_versions() -> None:
    refs = references("messirve", "test", {"full": "eswiki", "ar": "eswiki"})
    ar = refs["ar"][0]
    # the paper gives queries and passages only: no judgements or fingerprints to check
    assert comparability.check(full(ar, judgements=5_490, qrels_sha256="z"), refs["ar"]).comparable
    unknown = comparability.check(full(ar, version=None), refs["ar"])
    assert unknown.comparable and unknown.row()["version"] == "unknown"
    old = comparability.check(full(ar, version="v0.1", queries=5_400), refs["ar"])
    assert not old.comparable and old.reason == "topics and qrels v0.1, the reference is v1.0; 5,400 of 5,481 queries"
    none = comparability.check(full(ar, partition="zz"), [])
    assert (none.comparable, none.reason) == (False, "no reference sizes for partition zz")
    # v1.1 (the authors' later upload): its own counts where they are published, never the published numbers'
    v11 = comparability.check(full(ar, version="v1.1", queries=7_291), refs["ar"], published="v1.0")
    assert (v11.comparable, v11.reason) == (False, "the full data of v1.1; the published numbers are of v1.0")
    assert v11.row()["full_queries"] == 7_291
    short = comparability.check(full(ar, version="v1.1", queries=7_000), refs["ar"], published="v1.0")
    assert (short.comparable, short.reason) == (False, "7,000 of 7,291 queries")
    paper = comparability.check(full(ar), refs["ar"], published="v1.0")
    assert paper.comparable and paper.reference is not None and paper.reference.version == "v1.0"
    bo = refs["bo"] if "bo" in refs else references("messirve", "test", {"bo": "eswiki"})["bo"]
    no_count = comparability.check(full(bo[0], version="v1.1"), bo, published="v1.0")
    assert not no_count.comparable and no_count.reason.startswith("topics and qrels v1.1, the reference is v1.0")


def test_summary_names_the_partitions_and_their_reasons(tmp_path: Path) -> None:
    refs = miracl_refs()
    rows = [compare(full(refs["ar"], passages=24), refs["ar"]).row(), compare(full(refs["sw"]), refs["sw"]).row()]
    table = tmp_path / "c.tsv"
    table.write_text(format_tsv(comparability.COLUMNS, rows), encoding="utf-8")
    checks = comparability.read_comparability(table)
    assert comparability.comparable_partitions(checks) == {"sw"}
    assert comparability.run_notice(table, "miracl", ["ar", "sw"], []) == [
        "miracl: no published number is shown beside 1 of 2 partitions (not the full data they were computed on):",
        "  ar: 24 of 2,061,414 passages",
    ]
    assert comparability.run_notice(table, "miracl", ["sw"], []) == [
        f"miracl: every partition is comparable with the published numbers ({FULL_DATA})."
    ]
    assert comparability.run_notice(table, "miracl", ["ar", "bn"], []) == []  # another run's table
    newer = tmp_path / "corpus.parquet"
    newer.write_text("")
    os.utime(newer, (table.stat().st_mtime + 10, table.stat().st_mtime + 10))
    assert comparability.run_notice(table, "miracl", ["ar"], [newer]) == []  # older than the data: stale
    (tmp_path / "bad.tsv").write_text("x\ty\n1\t2\n", encoding="utf-8")
    notice = comparability.run_notice(tmp_path / "bad.tsv", "miracl", ["ar"], [])
    assert len(notice) == 1 and "could not summarise" in notice[0]  # never raises


# =========================================================================== fingerprints and real files


def write_topics(path: Path, rows: list[tuple[str, str]]) -> Path:
    path.write_text("".join(f"{q}\t{t}\n" for q, t in rows), encoding="utf-8")
    return path


def write_qrels(path: Path, rows: list[tuple[str, str, int]]) -> Path:
    path.write_text("".join(f"{q}\tQ0\t{d}\t{r}\n" for q, d, r in rows), encoding="utf-8")
    return path


def test_fingerprints_ignore_order_and_see_one_changed_judgement(tmp_path: Path) -> None:
    topics = [("1", "uno"), ("10020#0", "dos"), ("2", "tres")]
    qrels = [("1", "1#0", 1), ("1", "1#1", 0), ("10020#0", "10020#0", 0), ("2", "7#1", 1)]
    fps = []
    for name, t, q in (
        ("a", topics, qrels),
        ("b", topics[::-1], random.Random(1).sample(qrels, len(qrels))),
        ("c", topics, [*qrels[:3], ("2", "7#1", 0)]),
        ("d", topics[:2], qrels[:3]),
    ):
        out = tmp_path / name
        out.mkdir()
        build_topics(
            write_topics(out / "t.tsv", t), write_qrels(out / "q.tsv", q), out / "q.parquet", out / "j.parquet"
        )
        fps.append(
            (comparability.qids_fingerprint(out / "q.parquet"), comparability.qrels_fingerprint(out / "j.parquet"))
        )
    assert fps[0] == fps[1]  # the order of the lines does not matter
    assert fps[2][0] == fps[0][0] and fps[2][1] != fps[0][1]  # one relevance changed
    assert fps[3][0] != fps[0][0] and fps[3][1] != fps[0][1]  # a query dropped
    assert len({fp for pair in fps for fp in pair}) == 5


def build_dev(miracl_dev: Path, lang: str, out: Path, topics_lines: slice = slice(None)) -> tuple[Path, Path]:
    topics = miracl_dev / "topics" / f"topics.miracl-v1.0-{lang}-dev.tsv"
    if topics_lines != slice(None):
        lines = topics.read_text(encoding="utf-8").splitlines(keepends=True)[topics_lines]
        topics = out / "topics.tsv"
        topics.write_text("".join(lines), encoding="utf-8")
    queries, qrels = out / f"{lang}.queries.parquet", out / f"{lang}.qrels.parquet"
    build_topics(topics, miracl_dev / "qrels" / f"qrels.miracl-v1.0-{lang}-dev.tsv", queries, qrels)
    return queries, qrels


def test_shipped_fingerprints_equal_the_real_dev_files(miracl_dev: Path, tmp_path: Path) -> None:
    refs = miracl_refs()
    for lang in MIRACL_LANGUAGES:
        queries, qrels = build_dev(miracl_dev, lang, tmp_path)
        assert schemas.count_rows(queries) == refs[lang].queries == DEV_QUERIES[lang], lang
        assert schemas.count_rows(qrels) == refs[lang].judgements, lang
        assert comparability.qids_fingerprint(queries) == refs[lang].qids_sha256, lang
        assert comparability.qrels_fingerprint(qrels) == refs[lang].qrels_sha256, lang
        sizes = comparability.qrels_sizes(qrels)
        assert (sizes.relevant, sizes.judged_passages) == (refs[lang].relevant, refs[lang].judged_passages), lang


def corpus_of_size(path: Path, n: int) -> Path:
    schemas.write_table(
        pa.table(
            {name: [f"{i}#0" for i in range(n)] if name == "docid" else [""] * n for name in schemas.CORPUS.names}
        ),
        path,
        schemas.CORPUS,
    )
    return path


def test_stage_on_the_full_yoruba_data(miracl_dev: Path, tmp_path: Path) -> None:
    """Yoruba's full corpus is small enough to simulate (49,043 passages): the stage on real topics and qrels."""
    queries, qrels = build_dev(miracl_dev, "yo", tmp_path)
    out = tmp_path / "c.tsv"

    def stage(corpus: Path, q: Path = queries, version: str | None = "v1.0") -> dict[str, str]:
        comparability.comparability_stage(
            "miracl", "dev", ["yo"], {"yo": "yo"}, {"yo": corpus}, [q], [qrels], version, out
        )
        header, rows = read_tsv(out)
        assert tuple(header) == comparability.COLUMNS and len(rows) == 1
        return dict(zip(header, rows[0], strict=True))

    row = stage(corpus_of_size(tmp_path / "full.parquet", 49_043))
    assert (row["comparable"], row["reason"], row["passages"], row["queries"]) == ("yes", FULL_DATA, "49043", "119")
    assert (row["qids_fingerprint"], row["qrels_fingerprint"]) == ("match", "match")
    short = stage(corpus_of_size(tmp_path / "short.parquet", 49_042))
    assert (short["comparable"], short["reason"]) == ("no", "49,042 of 49,043 passages")
    sub = tmp_path / "sub"
    sub.mkdir()
    fewer, _ = build_dev(miracl_dev, "yo", sub, slice(1, None))  # the first query missing (and its judgements)
    row = stage(tmp_path / "full.parquet", fewer)
    assert row["comparable"] == "no" and row["reason"].startswith("118 of 119 queries")


# =========================================================================== published numbers filtered


def test_published_numbers_only_for_comparable_partitions() -> None:

    cfg = run_config({"languages": list(MIRACL_LANGUAGES)})
    ours = {"bm25": {lang: 0.5 for lang in MIRACL_LANGUAGES} | {"mean": 0.5}}

    def shown(comparable: set[str] | None) -> set[tuple[str, str]]:
        rows = published.side_by_side(ours, "miracl", "dev", "nDCG@10", cfg, comparable=comparable)
        return {(str(r["source_id"]), str(r["partition"])) for r in rows}

    every = shown(None)
    assert ("bge-m3-table11", "mean") in every and (PYSERINI_2CR, "ar") in every
    assert shown(set(MIRACL_LANGUAGES)) == every
    but_yo = shown(set(MIRACL_LANGUAGES) - {"yo"})
    assert but_yo == every - {(PYSERINI_2CR, "yo"), ("bge-m3-table11", "mean")}  # no mean without yo
    assert shown(set()) == set()
