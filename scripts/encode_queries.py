import sys

sys.path.insert(0, snakemake.scriptdir + "/..")  # noqa: F821 - the library beside scripts/

from miracl_eval.preload import Call, plain  # noqa: E402
from miracl_eval.stage import run_stage  # noqa: E402

sm = snakemake  # noqa: F821 - injected by Snakemake
p = sm.params
run_stage(
    sm,
    Call(
        "miracl_eval.encoders.stages",
        "encode_queries",
        plain((sm.input.queries, dict(sm.output.items()), p.spec)),
        plain(dict(batch_size=p.batch_size, device=p.device, dtype=p.dtype)),
    ),
    preload=sm.config["encoder"]["preload"],
)
