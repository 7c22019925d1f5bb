"""Running one workflow stage: logging to the job's log file, its GPUs, and one clear line on error.

``scripts/*.py`` call :func:`run_stage` with the library function that does the work. A job that
declares ``resources: gpu=N`` first leases N devices of its own (:func:`miracl_eval.devices.lease_gpus`;
under SLURM the scheduler's ``CUDA_VISIBLE_DEVICES`` stands). A
:class:`MiraclEvalError` (bad input, bad config, failed download) becomes one message on
stderr and in the log, and a non-zero exit; Snakemake then removes the job's outputs (which
are written atomically, so nothing partial is left in any case).
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable
from typing import Any

from .devices import lease_gpus
from .errors import MiraclEvalError


def setup_logging(log_path: str | None) -> None:
    handlers: list[logging.Handler] = [logging.StreamHandler(sys.stderr)]
    if log_path:
        handlers.append(logging.FileHandler(log_path, mode="w", encoding="utf-8"))
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s", handlers=handlers, force=True
    )


def run_stage(snakemake: Any, work: Callable[[], Any]) -> None:
    """Run ``work()`` for a Snakemake ``script:`` job; exit 1 with one line on a known error."""
    log_path = str(snakemake.log[0]) if len(snakemake.log) else None
    setup_logging(log_path)
    logger = logging.getLogger("miracl_eval.stage")
    logger.info("rule %s, wildcards %s", snakemake.rule, dict(snakemake.wildcards.items()))
    try:
        gpus = int(getattr(getattr(snakemake, "resources", None), "gpu", 0) or 0)
        if gpus > 0:
            lease_gpus(gpus)
        result = work()
    except MiraclEvalError as err:
        logger.error("%s", err)
        logging.shutdown()
        sys.exit(1)
    if result is not None:
        logger.info("done: %s", result)
