from miracl_eval.metrics import tables_stage
from miracl_eval.stage import run_stage

sm = snakemake  # noqa: F821 - injected by Snakemake
run_stage(
    sm,
    lambda: tables_stage(
        list(sm.input),
        sm.params.methods,
        sm.params.partitions,
        dict(sm.output.items()),
        mean_column=sm.params.mean_column,
    ),
)
