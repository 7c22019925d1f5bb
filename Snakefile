"""miracl-eval: MIRACL and MessIRve retrieval evaluation, corpus to nDCG@10.

snakemake --cores 8 results/miracl_ndcg.tsv
snakemake --cores 8 results/miracl_ndcg.tsv --configfile sample/miracl.yaml
"""

import copy
import os
import sys

# The library lives beside this file: importable here whatever the working directory is and
# whether or not it is pip-installed (scripts/ put it on their path the same way).
sys.path.insert(0, workflow.basedir)

from miracl_eval.config.validate import validate
from miracl_eval.config.provenance import log_config_origins
from miracl_eval.evaluation.reproduction import (
    check_settings as check_reproduction_settings,
)


configfile: "config.yaml"


report: "report/workflow.rst"


# the configuration as given (config files and --config), for the forecast's dry runs of the same run
CONFIG_AS_GIVEN = copy.deepcopy(config)
config = validate(config)
check_reproduction_settings(config["reproduction"])
log_config_origins(workflow, config)


include: "rules/common/run.smk"
include: "rules/common/paths.smk"
include: "rules/common/models.smk"
include: "rules/common/inputs.smk"
include: "rules/common/requests.smk"
include: "rules/data.smk"
include: "rules/preprocess.smk"
include: "rules/bm25.smk"
include: "rules/model.smk"
include: "rules/me5_small.smk"
include: "rules/encode.smk"
include: "rules/dense.smk"
include: "rules/sparse.smk"
include: "rules/fusion.smk"
include: "rules/hybrid.smk"
include: "rules/rerankers.smk"
include: "rules/evaluate.smk"
include: "rules/report.smk"
include: "rules/forecast.smk"


from miracl_eval.evaluation.comparability import run_notice
from miracl_eval.evaluation.context import context_notice
from miracl_eval.evaluation.reproduction import run_notice as reproduction_notice
from miracl_eval.inputs.judged import judged_notice
from miracl_eval.encoders.blocks import remember_earlier_devices
from miracl_eval.report.plan import plain_report_problem

ALL_TARGETS = [
    *expand(path("table"), dataset=DATASET.name, measure=MEASURE_KEYS),
    *REPORT_TARGETS,
]
# `snakemake --report` alone only collects finished files: say in one line what to run instead
_report_problem = plain_report_problem(
    sys.argv, [f for f in ALL_TARGETS if not os.path.exists(f)]
)
if _report_problem:
    sys.exit(_report_problem)


onstart:
    # before any job runs (Snakemake removes a block's manifest before it runs the block's job again): what
    # the manifests of releases before the dtype was recorded say of the devices their shards were made on
    for _folder in encoded_block_folders():
        remember_earlier_devices(_folder)


onsuccess:
    # what the checks that protect the tables found, a line per partition with something to say: why
    # its numbers are (not) shown beside the published ones, and judged passages missing from its
    # corpus (no method can retrieve them); never fails the run
    _data = (
        expand(path("corpus", dataset=DATASET.name), corpus=CORPORA)
        + expand(path("queries", dataset=DATASET.name), part=PARTS)
        + expand(path("qrels", dataset=DATASET.name), part=PARTS)
    )
    for line in run_notice(
        path("comparability", dataset=DATASET.name), DATASET.name, PARTS, _data
    ):
        print(line)
    for line in judged_notice(
        {
            p: (
                path("judged_not_in_corpus", dataset=DATASET.name, part=p),
                [
                    path("qrels", dataset=DATASET.name, part=p),
                    path(
                        "corpus", dataset=DATASET.name, corpus=DATASET.corpus_of(p)
                    ),
                ],
            )
            for p in PARTS
        }
    ):
        print(line)
    for line in reproduction_notice(
        path("reproduction", dataset=DATASET.name),
        expand(path("table"), dataset=DATASET.name, measure=MEASURE_KEYS),
        DATASET.name,
    ):
        print(line)
    for line in context_notice(
        path("context", dataset=DATASET.name),
        expand(path("table"), dataset=DATASET.name, measure=MEASURE_KEYS),
        DATASET.name,
    ):
        print(line)


localrules:
    all,


rule all:
    default_target: True
    input:
        ALL_TARGETS,
