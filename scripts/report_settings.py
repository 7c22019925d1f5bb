import sys

sys.path.insert(0, snakemake.scriptdir + "/..")  # noqa: F821 - the library beside scripts/

from miracl_eval.download import read_version  # noqa: E402
from miracl_eval.report import settings_stage  # noqa: E402
from miracl_eval.stage import run_stage  # noqa: E402

sm = snakemake  # noqa: F821 - injected by Snakemake
run_stage(
    sm,
    lambda: settings_stage(
        sm.params.settings,
        list(sm.input.corpora),
        sm.params.corpora,
        sm.params.shard_size,
        sm.output.tsv,
        sm.output.html,
        dataset=sm.params.dataset,
        version=read_version(sm.input.version),
    ),
)
