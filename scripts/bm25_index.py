import sys

sys.path.insert(0, snakemake.scriptdir + "/..")  # noqa: F821 - the library beside scripts/

from miracl_eval.jobs.runner import run_stage
from miracl_eval.lucene.bm25 import build_bm25_index

sm = snakemake  # noqa: F821 - injected by Snakemake
run_stage(
    sm,
    lambda: build_bm25_index(
        sm.input[0],
        sm.output[0],
        language=sm.params.language,
        thai=sm.params.thai,
        threads=sm.threads,
        log_path=sm.log[0],
        heap=sm.params.java_heap,
    ),
)
