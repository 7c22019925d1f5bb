"""Query and passage ids: what a TREC run or qrels file can hold.

TREC files are split on whitespace, so an id with a space in it shifts every later column
(``1455#1 Q0 8870 2 3 1.03 bm25``) and trec_eval, ranx and pyserini misread the line. An id is
therefore non-empty and printable without spaces: no whitespace or other separator, and no
control or invisible format character (a byte-order mark or a zero-width space would make two
ids that look equal differ). :func:`id_problem` checks one id as a loader reads it;
:func:`first_bad_id` checks a column of ids as a run is written, with the same rule.
"""

from __future__ import annotations

import unicodedata

import pyarrow as pa
import pyarrow.compute as pc

#: RE2 (pyarrow) form of the rule: Unicode separators (Z*) and "other" characters (C*)
_BAD_CHAR = r"[\p{Z}\p{C}]"


def _describe(char: str) -> str:
    code = f"U+{ord(char):04X}"
    try:
        return f"{code} ({unicodedata.name(char)})"
    except ValueError:  # control characters and surrogates have no name
        return code


def id_problem(value: str) -> str | None:
    """Why ``value`` cannot be a query or passage id, or ``None`` when it can."""
    if not value:
        return "is empty"
    if value.isprintable() and " " not in value:
        return None
    bad = next(c for c in value if c == " " or not c.isprintable())
    return f"contains {_describe(bad)}: ids must not contain whitespace or invisible characters"


def first_bad_id(ids: pa.Array | pa.ChunkedArray) -> str | None:
    """The first id of ``ids`` that :func:`id_problem` rejects, or ``None``."""
    bad = pc.or_(pc.equal(pc.utf8_length(ids), 0), pc.match_substring_regex(ids, _BAD_CHAR))
    if not pc.any(bad).as_py():
        return None
    return ids.filter(bad)[0].as_py()
