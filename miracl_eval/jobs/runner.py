"""Running one workflow stage: logging to the job's log file, its GPUs, and one clear line on error.

``scripts/*.py`` call :func:`run_stage` with the library function that does the work. A job that
declares ``resources: gpu=N`` first leases N devices of its own (:func:`miracl_eval.jobs.devices.lease_gpus`;
under SLURM the scheduler's ``CUDA_VISIBLE_DEVICES`` stands). A
:class:`MiraclEvalError` (bad input, bad config, failed download) becomes one message on
stderr and in the log, and a non-zero exit; Snakemake then removes the job's outputs (which
are written atomically, so nothing partial is left in any case). Any other exception is a bug
or a fault of the machine: its traceback goes to stderr and the log, and the exit is non-zero.
With ``preload``, a stage named by a :class:`~miracl_eval.jobs.preload.Call` may run in a process forked
from a warm one (:mod:`miracl_eval.jobs.preload`); its errors come back and are reported the same way.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable
from typing import Any

from miracl_eval.errors import MiraclEvalError
from miracl_eval.jobs.devices import lease_gpus
from miracl_eval.jobs.preload import Call, usable
from miracl_eval.jobs.preload import run as run_preloaded


def setup_logging(log_path: str | None) -> None:
    handlers: list[logging.Handler] = [logging.StreamHandler(sys.stderr)]
    if log_path:
        open(log_path, "w").close()  # a new log, then appended to (a preloaded child writes to it too)
        handlers.append(logging.FileHandler(log_path, mode="a", encoding="utf-8"))
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s", handlers=handlers, force=True
    )


def run_stage(snakemake: Any, work: Callable[[], Any], preload: bool = False) -> None:
    """Run ``work()`` for a Snakemake ``script:`` job; exit 1 with one line on a known error,
    with the traceback on any other (both in the job's log).

    ``preload``: ``work`` (a :class:`~miracl_eval.jobs.preload.Call`) runs in a child of the preload
    server where that is possible (:func:`miracl_eval.jobs.preload.usable`), see :mod:`miracl_eval.jobs.preload`."""
    log_path = str(snakemake.log[0]) if len(snakemake.log) else None
    setup_logging(log_path)
    logger = logging.getLogger("miracl_eval.jobs.runner")
    logger.info("rule %s, wildcards %s", snakemake.rule, dict(snakemake.wildcards.items()))
    try:
        gpus = int(getattr(getattr(snakemake, "resources", None), "gpu", 0) or 0)
        if gpus > 0:
            lease_gpus(gpus)
        result = run_preloaded(work, log_path) if preload and isinstance(work, Call) and usable() else work()
    except Exception as err:
        if isinstance(err, MiraclEvalError):
            logger.error("%s", err)
        else:
            logger.exception("unexpected error in rule %s", snakemake.rule)
        logging.shutdown()
        sys.exit(1)
    if result is not None:
        logger.info("done: %s", result)
