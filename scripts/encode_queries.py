import sys

sys.path.insert(0, snakemake.scriptdir + "/..")  # noqa: F821 - the library beside scripts/

from miracl_eval.encoders.registry import get_family  # noqa: E402
from miracl_eval.encoders.stages import encode_queries  # noqa: E402
from miracl_eval.stage import run_stage  # noqa: E402

sm = snakemake  # noqa: F821 - injected by Snakemake
p = sm.params
run_stage(
    sm,
    lambda: encode_queries(
        sm.input.queries,
        {"dense": sm.output.dense, "sparse": sm.output.sparse},
        get_family("bge-m3").resolve({"checkpoint": p.model, "query_max_length": p.max_length}),
        batch_size=p.batch_size,
        device=p.device,
        dtype=p.dtype,
    ),
)
