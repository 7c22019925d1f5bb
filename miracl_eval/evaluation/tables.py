"""The ``tables`` rule's stage: the results tables of every row (:mod:`.metrics`), and beside them the
rows' training (:mod:`.training`) and the verdicts of the published numbers (:mod:`.reproduction`).

It sits above the modules it calls, so that :mod:`.metrics` knows nothing of what is put beside its
tables.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

from miracl_eval.evaluation.metrics import MEASURES, keyed_inputs, write_tables
from miracl_eval.evaluation.reproduction import reproduction_stage
from miracl_eval.evaluation.training import write_training


def tables_stage(
    inputs: Sequence[str | os.PathLike[str]],
    methods: Sequence[str],
    partitions: Sequence[str],
    outputs: Mapping[str, str | os.PathLike[str]],
    mean_column: bool = True,
    training: Mapping[str, Mapping[str, str]] | None = None,
    training_out: str | os.PathLike[str] | None = None,
    reproduction: Mapping[str, Any] | None = None,
) -> dict[str, dict[str, dict[str, float]]]:
    """Stage entry point: ``inputs`` are per-query files ordered partition-major, method-minor. Beside
    the tables: with ``training`` (:func:`miracl_eval.config.systems.training`), the rows' training;
    with ``reproduction`` (``dataset``, ``split``, ``run_config``, ``comparability``, ``output``), the
    verdicts of the published numbers (:mod:`miracl_eval.evaluation.reproduction`)."""
    values = write_tables(keyed_inputs(inputs, methods, partitions), methods, partitions, outputs, mean_column)
    if training is not None and training_out is not None:
        write_training({m: training[m] for m in methods}, training_out)
    if reproduction is not None:
        names = {m.key: m.name for m in MEASURES}
        tables = {names[key]: path for key, path in outputs.items()}
        r = reproduction
        reproduction_stage(tables, r["dataset"], r["split"], r["run_config"], r["comparability"], r["output"])
    return values
