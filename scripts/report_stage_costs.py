import sys

sys.path.insert(0, snakemake.scriptdir + "/..")  # noqa: F821 - the library beside scripts/

from miracl_eval.jobs.runner import run_stage
from miracl_eval.report.stage_costs import stage_costs_stage

sm = snakemake  # noqa: F821 - injected by Snakemake
run_stage(
    sm,
    lambda: stage_costs_stage(
        sm.params.stats_dir,
        sm.params.patterns,
        sm.output.tsv,
        sm.output.html,
        allowed=sm.params.allowed,
        skip_rules=sm.params.skip_rules,
        dataset=sm.params.dataset,
        logs=sm.params.logs,
        ledgers=sm.params.ledgers,
    ),
)
