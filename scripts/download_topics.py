import sys

sys.path.insert(0, snakemake.scriptdir + "/..")  # noqa: F821 - the library beside scripts/

from miracl_eval.inputs.datasets import get_dataset
from miracl_eval.inputs.download import read_version, topics_qrels_stage
from miracl_eval.jobs.runner import run_stage

sm = snakemake  # noqa: F821 - injected by Snakemake
p = sm.params
run_stage(
    sm,
    lambda: topics_qrels_stage(
        get_dataset(sm.wildcards.dataset),
        sm.wildcards.part,
        p.split,
        sm.output.topics,
        sm.output.qrels,
        topics_from=p.topics_from,
        revision=p.revision,
        cache_dir=p.cache_dir,
        version=read_version(sm.input.version),
    ),
)
