"""Fixtures of the encoder tests."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from miracl_eval import schemas
from tests.helpers import CORPORA


@pytest.fixture(scope="module")
def corpus_parquet(tmp_path_factory) -> Path:
    rows = []
    for path in CORPORA[:6]:
        for line in path.read_text(encoding="utf-8").splitlines()[:12]:
            rec = json.loads(line)
            rows.append({**rec, "contents": f"{rec['title']} {rec['text']}"})
    path = tmp_path_factory.mktemp("corpus") / "corpus.parquet"
    pq.write_table(pa.Table.from_pylist(rows, schema=schemas.CORPUS), path, row_group_size=10)  # shards straddle groups
    return path
