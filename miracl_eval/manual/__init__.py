"""The manual's generated reference pages (``docs/``, built by ``make docs``): each written at every build
from what it documents, never by hand.

* :mod:`.markdown`: tables and cells;
* :mod:`.config_keys`: every configuration key (``config/schema.yaml``), every model family's, view's,
  reranker family's and hybrid's setting (their registries), with type, default and description;
* :mod:`.presets`: the shipped model and reranker presets, their settings and sources;
* :mod:`.published`: the published numbers' sources (``data/published``) and the reference sizes
  (``data/reference``);
* :mod:`.workflow`: the rules, their outputs and code, and every path pattern, as Snakemake parses the
  workflow;
* :mod:`.pages`: the pages by their place in ``docs/``.

The top layer: it reads every other subpackage and nothing reads it.
"""
