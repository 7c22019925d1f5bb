"""Type aliases shared by the library."""

from __future__ import annotations

import os

#: a file or folder path as the library's functions take it
PathLike = str | os.PathLike[str]
