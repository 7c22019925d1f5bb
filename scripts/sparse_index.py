import sys

sys.path.insert(0, snakemake.scriptdir + "/..")  # noqa: F821 - the library beside scripts/

from miracl_eval.sparse import build_sparse_index  # noqa: E402
from miracl_eval.stage import run_stage  # noqa: E402

sm = snakemake  # noqa: F821 - injected by Snakemake
run_stage(
    sm,
    lambda: build_sparse_index(
        list(sm.input),
        sm.output[0],
        factor=sm.params.quantization["scale"],
        rounding=sm.params.quantization["rounding"],
        threads=sm.threads,
        log_path=sm.log[0],
        heap=sm.params.java_heap,
    ),
)
