import sys

sys.path.insert(0, snakemake.scriptdir + "/..")  # noqa: F821 - the library beside scripts/

from miracl_eval.encoders.registry import throughput_settings
from miracl_eval.jobs.preload import Call, plain
from miracl_eval.jobs.requests import tokenizer_workers
from miracl_eval.jobs.runner import run_stage

sm = snakemake  # noqa: F821 - injected by Snakemake
p = sm.params
enc = sm.config["encoder"]
run_stage(
    sm,
    Call(
        "miracl_eval.encoders.encode",
        "encode_queries",
        plain((sm.input.queries, dict(sm.output.items()), p.spec, enc["batch_size"])),
        plain(
            dict(
                device=p.device,
                dtype=p.dtype,
                token_budget=enc["token_budget"],
                tokenizer_workers=tokenizer_workers(sm.threads, gpu=bool(sm.resources.get("gpu", 0))),
                settings=throughput_settings(sm.config["models"][sm.wildcards.model])
                | ({"api_run": p.api_run} if hasattr(p, "api_run") else {}),
            )
        ),
    ),
    preload=sm.config["preload"],
)
