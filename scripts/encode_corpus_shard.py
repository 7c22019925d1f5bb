import sys

sys.path.insert(0, snakemake.scriptdir + "/..")  # noqa: F821 - the library beside scripts/

from miracl_eval.jobs.preload import Call, plain
from miracl_eval.jobs.runner import run_stage

sm = snakemake  # noqa: F821 - injected by Snakemake
p = sm.params
run_stage(
    sm,
    Call(
        "miracl_eval.encoders.encode",
        "encode_corpus_shard",
        plain((sm.input.corpus, int(sm.wildcards.shard), p.shard_size, dict(sm.output.items()), p.spec)),
        plain(dict(batch_size=p.batch_size, device=p.device, dtype=p.dtype, dense_dtype=p.dense_dtype)),
    ),
    preload=sm.config["preload"],
)
