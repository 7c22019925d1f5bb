import sys

sys.path.insert(0, snakemake.scriptdir + "/..")  # noqa: F821 - the library beside scripts/

from miracl_eval.jobs.preload import Call, plain  # noqa: E402
from miracl_eval.jobs.runner import run_stage  # noqa: E402

sm = snakemake  # noqa: F821 - injected by Snakemake
run_stage(
    sm,
    Call(
        "miracl_eval.inputs.preprocess",
        "build_corpus_from",
        # strip: only for datasets whose passages are stripped (MTEB's), so other runs keep their params
        plain((sm.input[0], sm.output[0], sm.params.title_join, sm.params.duplicates, sm.params.get("strip", False))),
    ),
    preload=sm.config["preload"],
)
