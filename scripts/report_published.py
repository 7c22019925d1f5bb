import sys

sys.path.insert(0, snakemake.scriptdir + "/..")  # noqa: F821 - the library beside scripts/

from miracl_eval.jobs.runner import run_stage
from miracl_eval.report.published import published_stage

sm = snakemake  # noqa: F821 - injected by Snakemake
run_stage(
    sm,
    lambda: published_stage(
        {name: sm.input[key] for key, name in sm.params.measures.items()},
        sm.params.dataset,
        sm.params.split,
        sm.params.run_config,
        sm.input.comparability,
        sm.output.tsv,
        sm.output.html,
    ),
)
