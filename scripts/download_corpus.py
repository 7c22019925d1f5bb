from miracl_eval.datasets import get_dataset
from miracl_eval.download import download_corpus
from miracl_eval.stage import run_stage

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
