import sys

sys.path.insert(0, snakemake.scriptdir + "/..")  # noqa: F821 - the library beside scripts/

from miracl_eval.evaluation.comparability import comparability_stage
from miracl_eval.inputs.download import read_version
from miracl_eval.jobs.runner import run_stage

sm = snakemake  # noqa: F821 - injected by Snakemake
run_stage(
    sm,
    lambda: comparability_stage(
        sm.wildcards.dataset,
        sm.params.split,
        sm.params.partitions,
        sm.params.corpus_of,
        dict(zip(sm.params.corpora, sm.input.corpora, strict=True)),
        list(sm.input.queries),
        list(sm.input.qrels),
        read_version(sm.input.version),
        sm.output[0],
    ),
)
