"""The recipe for one's own model (``sample/your_model.yaml``, on the README's first screen): a dense model of
one's own and a reranker over its top 100 on MTEB's MIRACL hard negatives, run whole (tables, context, forecast
and the report's files) on the bundled sample with tiny checkpoints standing for one's own."""

from __future__ import annotations

import csv
from pathlib import Path

import pyarrow.parquet as pq

from miracl_eval.evaluation import context
from miracl_eval.report.forecast import read_forecast
from tests.helpers import REPO, sample_config, snakemake, write_config

RECIPE = REPO / "sample" / "your_model.yaml"
LANGS = ["sw", "yo"]  # the recipe's 18 cut to two, for time


def test_the_readme_shows_the_recipe_as_shipped() -> None:
    assert f"```yaml\n{RECIPE.read_text(encoding='utf-8')}```" in (REPO / "README.md").read_text(encoding="utf-8")


def test_ones_own_model_and_its_reranker_stand_beside_the_tasks_published_numbers(tmp_path: Path) -> None:
    cfg = sample_config(LANGS, file=RECIPE.name)
    assert cfg["dataset"] == "miracl-hn" and len(sample_config(file=RECIPE.name)["languages"]) == 18
    # the default target (tables, context, report files, forecast), from nothing: the checkpoints built too
    snakemake(tmp_path, write_config(tmp_path, cfg), seed=False)
    results = tmp_path / "results"
    table = list(csv.DictReader((results / "miracl-hn_ndcg.tsv").open(encoding="utf-8"), delimiter="\t"))
    assert [r["method"] for r in table] == ["bm25", "my-model/dense", "my-model/dense>>my-reranker"]
    for lang in LANGS:  # the reranked row holds the first stage's top 100 of each query (160 passages a language)
        first = pq.read_table(tmp_path / f"runs/miracl-hn/{lang}/my-model/dense.parquet").to_pandas()
        reranked = pq.read_table(tmp_path / f"runs/miracl-hn/{lang}/my-model/dense>>my-reranker.parquet").to_pandas()
        top = first[first["rank"] <= 100]
        assert set(zip(reranked["qid"], reranked["docid"], strict=True)) == set(zip(top["qid"], top["docid"],
                                                                                   strict=True))  # fmt: skip
        assert reranked.groupby("qid").size().max() == 100
    # every published number of the task for these languages, as context: on other data than this sample's
    shipped = REPO / "miracl_eval" / "data" / "published" / "mteb_miracl_hn.tsv"
    lines = [ln for ln in shipped.read_text(encoding="utf-8").splitlines() if not ln.startswith("#")]
    expected = [r for r in csv.DictReader(lines, delimiter="\t") if r["partition"] in LANGS]
    rows = context.read_context(results / "miracl-hn_context.tsv")
    assert sorted((r["system"], r["partition"], r["measure"], r["published"]) for r in rows) == sorted(
        (r["system"], r["partition"], r["measure"], r["value"]) for r in expected
    )
    checks = {r["partition"]: r["reason"] for r in csv.DictReader((results / "miracl-hn_comparability.tsv").open(),
                                                                  delimiter="\t")}  # fmt: skip
    assert {r["our_data"] for r in rows} == {f"{p}: {checks[p]}" for p in LANGS}
    assert {r["verdict_rows"] for r in rows} == {"-"}  # a sample meets no published number
    page = (results / "miracl-hn_ndcg.html").read_text(encoding="utf-8")
    assert "context, not a verdict" in page and "BAAI/bge-m3" in page and "95c8db7d" in page
    # the forecast (made in this run, from nothing) listed exactly the jobs that ran: one benchmark file each
    planned = {r["benchmark"] for r in read_forecast(results / "miracl-hn_forecast.tsv")}
    ran = {str(p.relative_to(tmp_path)) for p in (tmp_path / "stats").rglob("*.tsv")}
    assert planned == ran and len(ran) > 40
