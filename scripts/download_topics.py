import sys

sys.path.insert(0, snakemake.scriptdir + "/..")  # noqa: F821 - the library beside scripts/

from miracl_eval.datasets import get_dataset  # noqa: E402
from miracl_eval.download import download_topics_qrels, read_version  # noqa: E402
from miracl_eval.stage import run_stage  # noqa: E402

sm = snakemake  # noqa: F821 - injected by Snakemake
run_stage(
    sm,
    lambda: download_topics_qrels(
        get_dataset(sm.wildcards.dataset),
        sm.wildcards.part,
        sm.params.split,
        sm.output.topics,
        sm.output.qrels,
        revision=sm.params.revision,
        cache_dir=sm.params.cache_dir,
        version=read_version(sm.input.version),
    ),
)
