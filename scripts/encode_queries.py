import sys

sys.path.insert(0, snakemake.scriptdir + "/..")  # noqa: F821 - the library beside scripts/

from miracl_eval.encoders.stages import encode_queries  # noqa: E402
from miracl_eval.stage import run_stage  # noqa: E402

sm = snakemake  # noqa: F821 - injected by Snakemake
p = sm.params
run_stage(
    sm,
    lambda: encode_queries(
        sm.input.queries,
        dict(sm.output.items()),
        p.spec,
        batch_size=p.batch_size,
        device=p.device,
        dtype=p.dtype,
    ),
)
