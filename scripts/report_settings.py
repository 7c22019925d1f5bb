import sys

sys.path.insert(0, snakemake.scriptdir + "/..")  # noqa: F821 - the library beside scripts/

from miracl_eval.inputs.download import read_version
from miracl_eval.jobs.runner import run_stage
from miracl_eval.report.settings import settings_stage

sm = snakemake  # noqa: F821 - injected by Snakemake
run_stage(
    sm,
    lambda: settings_stage(
        sm.params.settings,
        list(sm.input.corpora),
        sm.params.corpora,
        sm.params.shard_size,
        sm.output.tsv,
        sm.output.html,
        dataset=sm.params.dataset,
        version=read_version(sm.input.version),
        fetched=sm.params.fetched,
    ),
)
