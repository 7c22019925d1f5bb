import sys

sys.path.insert(0, snakemake.scriptdir + "/..")  # noqa: F821 - the library beside scripts/

from miracl_eval.jobs.runner import run_stage
from miracl_eval.lucene.sparse import sparse_search

sm = snakemake  # noqa: F821 - injected by Snakemake
run_stage(
    sm,
    lambda: sparse_search(
        sm.input.index,
        sm.input.queries,
        sm.output.run,
        sm.output.trec,
        factor=sm.params.quantization["scale"],
        rounding=sm.params.quantization["rounding"],
        tag=sm.params.tag,
        k=sm.params.hits,
        threads=sm.threads,
    ),
)
