import sys

sys.path.insert(0, snakemake.scriptdir + "/..")  # noqa: F821 - the library beside scripts/

from miracl_eval.jobs.runner import run_stage
from miracl_eval.lucene.bm25 import bm25_search

sm = snakemake  # noqa: F821 - injected by Snakemake
run_stage(
    sm,
    lambda: bm25_search(
        sm.input.index,
        sm.input.queries,
        sm.output.run,
        sm.output.trec,
        k1=sm.params.k1,
        b=sm.params.b,
        k=sm.params.hits,
        threads=sm.threads,
    ),
)
