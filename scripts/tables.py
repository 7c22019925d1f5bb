import sys

sys.path.insert(0, snakemake.scriptdir + "/..")  # noqa: F821 - the library beside scripts/

from miracl_eval.metrics import tables_stage  # noqa: E402
from miracl_eval.stage import run_stage  # noqa: E402

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
