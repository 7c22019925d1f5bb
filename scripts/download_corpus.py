import sys

sys.path.insert(0, snakemake.scriptdir + "/..")  # noqa: F821 - the library beside scripts/

from miracl_eval.inputs.datasets import get_dataset
from miracl_eval.inputs.download import download_corpus
from miracl_eval.jobs.runner import run_stage

sm = snakemake  # noqa: F821 - injected by Snakemake
run_stage(
    sm,
    lambda: download_corpus(
        get_dataset(sm.wildcards.dataset),
        sm.wildcards.corpus,
        sm.output[0],
        revision=sm.params.revision,
        cache_dir=sm.params.cache_dir,
    ),
)
