"""Which pyserini release the Lucene jobs run, without importing it (parsing the Snakefile imports no
engine).

pyserini's reproduction references change between releases (2.3.0 rebuilt its MIRACL indexes with
Lucene 10.4, a new Korean analyzer and Lucene 10's Persian stemming: BM25 and BM25 + mDPR moved for fa
and ko), so a run is compared with the references of the release it runs (the published rows'
``pyserini.release=...`` requirement, :mod:`miracl_eval.evaluation.published`). With jobs in conda
environments that is the pin of ``envs/lucene.yaml``; otherwise the pyserini installed beside the
workflow (its metadata).
"""

from __future__ import annotations

import importlib.metadata
import os
import re
from pathlib import Path

from miracl_eval.errors import InputError

#: the Lucene jobs' conda environment, relative to the workflow's folder
ENV_FILE = Path("envs") / "lucene.yaml"
_PIN = re.compile(r"^\s*-\s*pyserini\s*==\s*([0-9][0-9A-Za-z.+-]*)\s*$")


def pinned_release(env_file: str | os.PathLike[str]) -> str:
    """The release that a conda environment file pins (``- pyserini==X``)."""
    with open(env_file, encoding="utf-8") as fh:
        pins = [m.group(1) for m in map(_PIN.match, fh) if m]
    if len(pins) != 1:
        raise InputError(env_file, f"{len(pins)} pins of pyserini (pyserini==X), expected one")
    return pins[0]


def installed_release() -> str | None:
    """The installed pyserini's version, None when it is not installed."""
    try:
        return importlib.metadata.version("pyserini")
    except importlib.metadata.PackageNotFoundError:
        return None


def pyserini_release(workflow_dir: str | os.PathLike[str], conda: bool) -> str | None:
    """The release the Lucene jobs run: ``envs/lucene.yaml``'s pin when jobs run in conda environments,
    else the installed one (None: no pyserini, so no pyserini reference is comparable)."""
    return pinned_release(Path(workflow_dir) / ENV_FILE) if conda else installed_release()


def engine_facts(release: str | None) -> dict[str, dict[str, str | None]]:
    """The facts a run's rows are matched on beside its configuration: ``pyserini.release``."""
    return {"pyserini": {"release": release}}
