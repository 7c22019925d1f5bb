import sys

sys.path.insert(0, snakemake.scriptdir + "/..")  # noqa: F821 - the library beside scripts/

from miracl_eval.stage import run_stage  # noqa: E402
from miracl_eval.tiny_model import build_tiny_checkpoint, texts_from_corpora  # noqa: E402

sm = snakemake  # noqa: F821 - injected by Snakemake
run_stage(
    sm,
    lambda: build_tiny_checkpoint(
        sm.output[0], texts_from_corpora(list(sm.input)), kind=sm.wildcards.tiny, seed=sm.params.seed
    ),
)
