"""Imports as on the device machine's image: a dry run here (benchmarks/device_session.sh with
IMAGE_CHECK=1) puts this folder on PYTHONPATH, and an import that this project's code (the library,
the benchmarks) makes of a module whose distribution is neither in ``packages.txt`` (the image's)
nor in ``MIRACL_EVAL_CARRIED`` (the wheels carried there, space-separated names) fails as it would
there. Installed packages importing their own dependencies are let be (the image has its own
versions of them, with their own dependencies); the standard library imports as usual.
"""

import importlib.abc
import importlib.metadata
import os
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
OURS = (str(REPO / "miracl_eval"), str(REPO / "benchmarks"))


def _importer() -> str:
    """The file of the frame that asked for the import (the first one outside the import machinery)."""
    frame = sys._getframe(2)
    while frame is not None and (
        frame.f_code.co_filename.startswith("<frozen") or "importlib" in frame.f_code.co_filename
    ):
        frame = frame.f_back
    return frame.f_code.co_filename if frame is not None else ""


def _names(text: str) -> set[str]:
    return {w.strip().lower().replace("_", "-") for w in text.split() if w.strip() and not w.startswith("#")}


class _ImageOnly(importlib.abc.MetaPathFinder):
    def __init__(self, allowed: set[str]) -> None:
        self.allowed = allowed
        self.owners = importlib.metadata.packages_distributions()

    def find_spec(self, fullname, path=None, target=None):  # noqa: ANN001
        top = fullname.partition(".")[0]
        if path is not None or top in sys.stdlib_module_names:
            return None
        dists = {d.lower().replace("_", "-") for d in self.owners.get(top, [])}
        if dists and not dists & self.allowed and _importer().startswith(OURS):
            raise ModuleNotFoundError(
                f"No module named '{top}' on the device image ({', '.join(sorted(dists))} is neither installed "
                "there nor carried by benchmarks/fetch_wheels.sh)",
                name=top,
            )
        return None


if os.environ.get("MIRACL_EVAL_IMAGE_CHECK"):
    listed = (Path(__file__).with_name("packages.txt")).read_text(encoding="utf-8")
    lines = "\n".join(line for line in listed.splitlines() if not line.startswith("#"))
    carried = _names(os.environ.get("MIRACL_EVAL_CARRIED", ""))
    sys.meta_path.insert(0, _ImageOnly(_names(lines) | carried | {"miracl-eval"}))  # the project travels as its tree
