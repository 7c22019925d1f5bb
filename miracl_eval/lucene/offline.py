"""pyserini's own Python modules (its searchers and encoders, the tests' and benchmarks' oracles) on a
machine without network.

pyserini 2.4.0's ``pyserini.util`` (imported by ``pyserini.search``, ``pyserini.encode``, ``pyserini.index``)
builds two aliases of its prebuilt-index tables at import, and reading them downloads the tables' JSON
files from ``raw.githubusercontent.com/castorini/prebuilt-indexes``: without network the import fails
(``URLError``), and on a compute node behind a firewall it waits for the connection's time-out. The
workflow never imports those modules (:mod:`miracl_eval.lucene.anserini` reaches Anserini's classes
directly); the oracles do. :func:`import_pyserini` imports a module with those downloads answered by an
empty table that holds only the two names the aliases read: no prebuilt index can be named then, which
nothing here does.
"""

from __future__ import annotations

import importlib
import io
import json
import sys
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from types import ModuleType
from typing import Any

from miracl_eval.lucene.jvm import ensure_jvm

#: where pyserini's prebuilt-index tables are downloaded from at import
TABLES_URL = "https://raw.githubusercontent.com/castorini/prebuilt-indexes/"
#: the entries ``pyserini.prebuilt_index_info`` reads while it is imported (its aliases)
_READ_AT_IMPORT = ("msmarco-v1-passage.unicoil", "msmarco-v2-passage.unicoil-0shot")


def _stub_table() -> bytes:
    fields = {"description": "", "filename": "", "urls": [], "md5": "", "size": 0}
    return json.dumps([{"name": name, **fields} for name in _READ_AT_IMPORT]).encode()


@contextmanager
def _tables_offline() -> Iterator[None]:
    original = urllib.request.urlopen

    def urlopen(url: Any, *args: Any, **kwargs: Any) -> Any:
        if isinstance(url, str) and url.startswith(TABLES_URL):
            return io.BytesIO(_stub_table())
        return original(url, *args, **kwargs)

    urllib.request.urlopen = urlopen
    try:
        yield
    finally:
        urllib.request.urlopen = original


def import_pyserini(module: str) -> ModuleType:
    """``importlib.import_module(module)`` for a pyserini module, without network (see above), its JVM
    started as :func:`miracl_eval.lucene.jvm.ensure_jvm` starts it."""
    ensure_jvm()
    if "pyserini.prebuilt_index_info" in sys.modules:
        return importlib.import_module(module)
    with _tables_offline():
        importlib.import_module("pyserini.prebuilt_index_info")
    return importlib.import_module(module)
