"""Which rows are zero-shot: ``results/{dataset}_training.tsv`` beside the result tables.

A row is in-domain when its model was trained on the training split of the run's dataset (MTEB
records that BGE-M3 and the multilingual E5 models were trained on MIRACL's; the MessIRve paper
separates zero-shot from fine-tuned rows): its dev or test scores are not zero-shot numbers. What is
known comes from each model's ``trained_on`` setting (shipped presets give it with its source,
``miracl_eval/data/presets.yaml``); :func:`miracl_eval.config.systems.training` decides per row.
"""

from __future__ import annotations

from collections.abc import Mapping

from miracl_eval.atomic import write_text_atomic
from miracl_eval.tsv import format_tsv
from miracl_eval.types import PathLike

COLUMNS = ("row", "training", "trained_on")


def write_training(rows: Mapping[str, Mapping[str, str]], output: PathLike) -> None:
    """Write one line per row (``training``: zero-shot, in-domain or unknown), atomically."""
    records = [{"row": label, "training": r["training"], "trained_on": r["trained_on"]} for label, r in rows.items()]
    write_text_atomic(output, format_tsv(COLUMNS, records))
