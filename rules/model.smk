# The offline demo/test model: a tiny random BGE-M3-layout checkpoint with a tokenizer trained
# on the whole bundled sample (fixed inputs, so adding a language never rebuilds it).


rule tiny_model:
    input:
        expand(
            os.path.join(workflow.basedir, "sample/miracl/{lang}/corpus.jsonl"),
            lang=DATASET.partitions if DATASET.name == "miracl" else [],
        ),
        os.path.join(workflow.basedir, "sample/messirve/corpus.jsonl"),
    output:
        directory(TINY_MODEL),
    log:
        "logs/models/tiny-bge-m3.log",
    benchmark:
        "stats/models/tiny-bge-m3.tsv"
    conda:
        "../envs/encode.yaml"
    threads: 1
    resources:
        mem_mb=2000,
    params:
        seed=0,
    script:
        "../scripts/tiny_model.py"
