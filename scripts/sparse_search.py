import sys

sys.path.insert(0, snakemake.scriptdir + "/..")  # noqa: F821 - the library beside scripts/

from miracl_eval.sparse import sparse_search  # noqa: E402
from miracl_eval.stage import run_stage  # noqa: E402

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
