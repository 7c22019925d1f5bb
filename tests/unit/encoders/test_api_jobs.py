"""What the workflow asks of an API model's jobs: the resource that holds them to ``api_jobs`` at once, each
job's name in the model's ledger, and what the cost plan depends on (not the throughput settings)."""

from __future__ import annotations

from pathlib import Path

from miracl_eval.config.models import resolve_model
from miracl_eval.encoders.api_ledger import job_file, job_name
from miracl_eval.encoders.api_pace import slot_resources
from miracl_eval.encoders.api_plan import plan_settings
from miracl_eval.encoders.registry import encoding_settings


def test_each_api_model_has_a_resource_of_its_own() -> None:
    assert slot_resources([]) == {}
    assert slot_resources(["openai-3-small", "openai_3_small", "m.x", "modèle"]) == {
        "openai-3-small": "api_openai_3_small",
        "openai_3_small": "api_openai_3_small_",  # the same once its characters are replaced: one more _
        "m.x": "api_m_x",
        "modèle": "api_modèle",
    }


def test_a_jobs_name_in_the_ledger_says_its_block_or_partition(tmp_path: Path) -> None:
    corpus = {"dataset": "miracl", "model": "openai-3-small", "corpus": "sw", "block": "00000-00003"}
    assert job_name(corpus) == "corpus-sw-00000-00003"
    assert job_name({"dataset": "miracl", "model": "openai-3-small", "part": "sw"}) == "queries-sw"
    assert job_file(tmp_path, job_name(corpus)) == tmp_path / "corpus-sw-00000-00003.jsonl"


def test_the_cost_plan_depends_on_what_is_sent_its_price_and_budget() -> None:
    spec = resolve_model("openai-3-small", {})
    plan = plan_settings(spec)
    assert plan == {
        **encoding_settings(spec),
        "price_per_million_tokens": spec["price_per_million_tokens"],
        "max_usd": spec["max_usd"],
    }
    assert plan_settings(resolve_model("openai-3-small", {"concurrency": 32, "api_jobs": 2})) == plan
    assert plan_settings(resolve_model("openai-3-small", {"max_usd": 1})) != plan
    assert plan_settings(resolve_model("openai-3-small", {"dimensions": 256})) != plan
