"""miracl-eval: MIRACL and MessIRve retrieval evaluation, corpus to nDCG@10.

    snakemake --cores 8 results/miracl_ndcg.tsv
    snakemake --cores 8 results/miracl_ndcg.tsv --configfile sample/miracl.yaml
"""

import os
import sys

# The library lives beside this file; make it importable here and in every job's script,
# wherever the working directory is (--directory) and whether or not it is pip-installed.
sys.path.insert(0, workflow.basedir)
os.environ["PYTHONPATH"] = os.pathsep.join(
    p for p in (workflow.basedir, os.environ.get("PYTHONPATH")) if p
)

from miracl_eval.config import validate


configfile: "config.yaml"


config = validate(config)


include: "rules/common.smk"
include: "rules/data.smk"
include: "rules/preprocess.smk"
include: "rules/bm25.smk"
include: "rules/evaluate.smk"


localrules:
    all,


rule all:
    input:
        expand("results/{dataset}_{measure}.tsv", dataset=DATASET.name, measure=MEASURE_KEYS),
    default_target: True
