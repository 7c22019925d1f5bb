import sys

sys.path.insert(0, snakemake.scriptdir + "/..")  # noqa: F821 - the library beside scripts/

from miracl_eval.jobs.preload import Call, plain  # noqa: E402
from miracl_eval.jobs.runner import run_stage  # noqa: E402

sm = snakemake  # noqa: F821 - injected by Snakemake
i, p = sm.input, sm.params
run_stage(
    sm,
    Call(
        "miracl_eval.rerankers.stage",
        "reranker_scores_stage",
        plain((i.run, i.queries, p.chunk_size, int(sm.wildcards.chunk), p.depth, i.corpus, dict(p.spec))),
        plain(
            dict(
                output=sm.output[0],
                # throughput only: read from the config, so that a new batch size re-runs nothing
                batch_size=sm.config["rerankers"][sm.wildcards.reranker]["batch_size"],
                device=p.device,
                dtype=p.dtype,
            )
        ),
    ),
    preload=sm.config["preload"],
)
