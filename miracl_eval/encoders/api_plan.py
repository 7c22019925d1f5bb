"""What an API model's encodings will cost, known before any request: the plan that every encoding job of
the model waits on (``rules/encode.smk``: ``api_cost_plan``).

The texts are those the jobs send (the title join, the prefixes), counted with the model's tokenizer
and cut to the max lengths as the jobs cut them: every text of a corpus of up to :data:`EXACT_ROWS`
passages, else those of row groups spread evenly over it (about that many), scaled to the corpus (the
plan says which).
Without a tokenizer, tokens are estimated as characters / 4. The plan is written as JSON and logged;
when its dollars exceed the model's ``max_usd``, the job fails with a :class:`ConfigError` naming that
setting and the estimate, and writes nothing: no encoding job starts, so no request is sent. The
encoding jobs check ``max_usd`` again before each request, against the model's ledger and what the plan
says is left (:class:`miracl_eval.encoders.api_ledger.Budget`).
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
from collections.abc import Mapping
from typing import Any

import numpy as np
import pyarrow.parquet as pq

from miracl_eval import schemas
from miracl_eval.atomic import write_text_atomic
from miracl_eval.encoders.registry import encoding_settings
from miracl_eval.errors import ConfigError
from miracl_eval.inputs.passages import passage_texts, text_columns
from miracl_eval.types import PathLike

log = logging.getLogger(__name__)

#: passages counted one by one in each corpus; a larger corpus is sampled evenly
EXACT_ROWS = 200_000
#: characters a token when there is no tokenizer (OpenAI's rule of thumb for English)
CHARS_PER_TOKEN = 4.0


def _tokens(texts: list[str], limit: int, tokenizer: Any) -> int:
    if tokenizer is None:
        return int(sum(min(limit, max(1, round(len(t) / CHARS_PER_TOKEN))) for t in texts))
    return int(sum(min(limit, max(1, len(ids))) for ids in tokenizer.encode(texts)))


def _count(path: PathLike, columns: list[str], texts_of: Any, prefix: str, limit: int, tokenizer: Any) -> dict:
    """``{"inputs", "tokens", "counted"}`` of one Parquet file of texts: every text of a file of up to
    :data:`EXACT_ROWS`, else those of whole row groups spread evenly over the file (about that many
    texts), scaled to the file; read a batch at a time (``counted``: texts tokenized)."""
    meta = pq.read_metadata(path)
    n = meta.num_rows
    sizes = [meta.row_group(g).num_rows for g in range(meta.num_row_groups)]
    groups = list(range(len(sizes)))
    if n > EXACT_ROWS:
        wanted = min(len(sizes), math.ceil(EXACT_ROWS * len(sizes) / n))
        groups = sorted({int(g) for g in np.linspace(0, len(sizes) - 1, wanted).round()})
    counted = sum(sizes[g] for g in groups)
    tokens = 0
    for batch in schemas.iter_batches(path, batch_rows=4096, columns=columns, row_groups=groups):
        tokens += _tokens([prefix + t for t in texts_of(batch)], limit, tokenizer)
    scaled = round(tokens * n / counted) if counted else 0
    return {"inputs": n, "tokens": int(scaled), "counted": int(counted)}


def plan_settings(spec: Mapping[str, Any]) -> dict[str, Any]:
    """What an API model's cost plan depends on (the ``api_cost_plan`` job's params): what is sent (its
    encoding settings), its price and its budget; not its throughput settings, which change no cost."""
    return {
        **encoding_settings(spec),
        "price_per_million_tokens": spec["price_per_million_tokens"],
        "max_usd": spec["max_usd"],
    }


def sent_settings(spec: Mapping[str, Any]) -> str:
    """A digest of what an API model's jobs send (a plan's settings but its price and budget)."""
    sent = {k: v for k, v in spec.items() if k not in ("price_per_million_tokens", "max_usd")}
    return hashlib.sha256(json.dumps(sent, sort_keys=True, default=str).encode()).hexdigest()[:16]


def cost_plan(
    corpora: Mapping[str, PathLike], queries: Mapping[str, PathLike], spec: Mapping[str, Any], model: str, out: PathLike
) -> dict[str, Any]:
    """Stage: the plan of model ``model`` (a resolved API spec) over ``corpora`` and ``queries`` (by name);
    writes ``out`` (JSON) unless it costs more than ``max_usd``."""
    from miracl_eval.encoders.openai import load_tokenizer

    tokenizer = load_tokenizer(spec)
    join = spec["title_join"]
    parts: dict[str, dict] = {}
    for name, path in corpora.items():
        parts[f"corpus {name}"] = _count(path, ["docid", *text_columns(join)], lambda b: passage_texts(b, join),
                                         spec["passage_prefix"], int(spec["passage_max_length"]), tokenizer)  # fmt: skip
    for name, path in queries.items():
        parts[f"queries {name}"] = _count(path, ["qid", "query"], lambda b: b.column("query").to_pylist(),
                                          spec["query_prefix"], int(spec["query_max_length"]), tokenizer)  # fmt: skip
    inputs = sum(p["inputs"] for p in parts.values())
    tokens = sum(p["tokens"] for p in parts.values())
    price = float(spec["price_per_million_tokens"])
    usd = tokens * price / 1e6
    plan = {
        "model": model,
        "api_model": spec["checkpoint"],
        "base_url": spec["base_url"],
        "inputs": inputs,
        "tokens": tokens,
        "counted_with": tokenizer.name if tokenizer else f"characters / {CHARS_PER_TOKEN:g} (no tokenizer)",
        "sampled": any(p["counted"] < p["inputs"] for p in parts.values()),
        "price_per_million_tokens": price,
        "usd": round(usd, 4),
        "max_usd": float(spec["max_usd"]),
        "parts": parts,
        # what is sent (the plan's settings but its price and budget): the ledger's lines of these settings
        # are the plan's texts already answered (miracl_eval.encoders.api_ledger)
        "settings": sent_settings(spec),
    }
    log.warning(
        "embeddings API plan for %s (%s): %s inputs, %s tokens (counted with %s%s), $%.2f at $%g per 1M tokens; "
        "max_usd %g",
        model, spec["checkpoint"], f"{inputs:,}", f"{tokens:,}", plan["counted_with"],
        ", sampled" if plan["sampled"] else "", usd, price, plan["max_usd"],
    )  # fmt: skip
    if usd > float(spec["max_usd"]):
        raise ConfigError(
            f"models.{model}.max_usd",
            f"the plan costs ${usd:,.2f} ({tokens:,} tokens at ${price:g} per 1M), more than max_usd ${spec['max_usd']:g}:"
            " no request was sent (raise max_usd to run it)",
        )
    write_text_atomic(out, json.dumps(plan, indent=1) + "\n")
    return {"inputs": inputs, "tokens": tokens, "usd": plan["usd"]}
