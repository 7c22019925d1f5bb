"""The texts of the bundled samples (``sample/``): what the model parity checks and benchmarks encode."""

from __future__ import annotations

import os
from pathlib import Path

from miracl_eval.inputs.datasets import MESSIRVE, MIRACL
from miracl_eval.inputs.loading import iter_corpus, iter_topics
from miracl_eval.inputs.preprocess import join_title


def sample_texts(sample_dir: str | os.PathLike[str]) -> list[tuple[bool, str]]:
    """``(is_query, text)`` of every distinct query and passage of the MIRACL and MessIRve samples under
    ``sample_dir``, passages joined with their dataset's title join, in file order."""
    sample = Path(sample_dir)
    texts: dict[tuple[bool, str], None] = {}
    corpora = [(p, MIRACL.title_join) for p in sorted((sample / "miracl").glob("*/corpus.jsonl"))]
    corpora.append((sample / "messirve" / "corpus.jsonl", MESSIRVE.title_join))
    for path, template in corpora:
        for _, passage in iter_corpus(path):
            texts[(False, join_title(passage.title, passage.text, template))] = None
    for path in [
        *sorted((sample / "miracl").glob("*/topics.tsv")),
        *sorted((sample / "messirve").glob("*/topics.tsv")),
    ]:
        for _, _, query in iter_topics(path):
            texts[(True, query)] = None
    return list(texts)
