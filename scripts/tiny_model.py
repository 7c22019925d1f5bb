import sys

sys.path.insert(0, snakemake.scriptdir + "/..")  # noqa: F821 - the library beside scripts/

from miracl_eval.jobs.runner import run_stage
from miracl_eval.offline.tiny import build_tiny_checkpoint, texts_from_corpora

sm = snakemake  # noqa: F821 - injected by Snakemake
run_stage(
    sm,
    lambda: build_tiny_checkpoint(
        sm.output[0], texts_from_corpora(list(sm.input)), kind=sm.wildcards.tiny, seed=sm.params.seed
    ),
)
