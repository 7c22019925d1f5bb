import sys

sys.path.insert(0, snakemake.scriptdir + "/..")  # noqa: F821 - the library beside scripts/

from miracl_eval.evaluation.tables import tables_stage
from miracl_eval.jobs.runner import run_stage

sm = snakemake  # noqa: F821 - injected by Snakemake
run_stage(
    sm,
    lambda: tables_stage(
        list(sm.input.per_query),
        sm.params.methods,
        sm.params.partitions,
        {key: path for key, path in sm.output.items() if key not in ("training", "reproduction")},
        mean_column=sm.params.mean_column,
        training=sm.params.training,
        training_out=sm.output.training,
        reproduction={
            "dataset": sm.params.dataset,
            "split": sm.params.split,
            "run_config": {**sm.config, **sm.params.engines, "reproduction": sm.params.reproduction},
            "comparability": sm.input.comparability,
            "output": sm.output.reproduction,
        },
    ),
)
