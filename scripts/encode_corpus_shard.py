import sys

sys.path.insert(0, snakemake.scriptdir + "/..")  # noqa: F821 - the library beside scripts/

from miracl_eval.encoders.stages import encode_corpus_shard  # noqa: E402
from miracl_eval.stage import run_stage  # noqa: E402

sm = snakemake  # noqa: F821 - injected by Snakemake
p = sm.params
run_stage(
    sm,
    lambda: encode_corpus_shard(
        sm.input.corpus,
        int(sm.wildcards.shard),
        p.shard_size,
        dict(sm.output.items()),
        p.spec,
        batch_size=p.batch_size,
        device=p.device,
        dtype=p.dtype,
        dense_dtype=p.dense_dtype,
    ),
)
