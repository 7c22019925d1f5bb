import sys

sys.path.insert(0, snakemake.scriptdir + "/..")  # noqa: F821 - the library beside scripts/

from miracl_eval.jobs.runner import run_stage
from miracl_eval.lucene.sparse import build_sparse_index

sm = snakemake  # noqa: F821 - injected by Snakemake
run_stage(
    sm,
    lambda: build_sparse_index(
        list(sm.params.shards),
        sm.output[0],
        factor=sm.params.quantization["scale"],
        rounding=sm.params.quantization["rounding"],
        threads=sm.threads,
        log_path=sm.log[0],
        heap=sm.params.java_heap,
    ),
)
