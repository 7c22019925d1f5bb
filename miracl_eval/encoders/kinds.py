"""The words every encoder module shares: the role of a text (a query or a passage) and the kinds of
output a family gives (dense vectors, sparse lexical weights). No torch: the pipeline, the base and
the stages all import it."""

from __future__ import annotations

from typing import Literal

Role = Literal["query", "passage"]
ROLES: tuple[Role, ...] = ("query", "passage")
DENSE, SPARSE = "dense", "sparse"
