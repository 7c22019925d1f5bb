# Downloads from the Hugging Face hub; used only when the config has no local `source`.


rule download_corpus:
    output:
        directory("resources/{dataset}/downloads/corpus/{corpus}"),
    log:
        "logs/{dataset}/download_corpus/{corpus}.log",
    benchmark:
        "stats/{dataset}/download_corpus/{corpus}.tsv"
    conda:
        "../envs/data.yaml"
    threads: 1
    resources:
        **request("download"),
    params:
        revision=config["hub"]["revision"],
        cache_dir=config["hub"]["cache_dir"],
    script:
        "../scripts/download_corpus.py"


rule download_topics:
    output:
        topics="resources/{dataset}/downloads/topics/{part}/topics.tsv",
        qrels="resources/{dataset}/downloads/topics/{part}/qrels.tsv",
    log:
        "logs/{dataset}/download_topics/{part}.log",
    benchmark:
        "stats/{dataset}/download_topics/{part}.tsv"
    conda:
        "../envs/data.yaml"
    threads: 1
    resources:
        **request("download"),
    params:
        split=config["split"],
        revision=config["hub"]["revision"],
        cache_dir=config["hub"]["cache_dir"],
    script:
        "../scripts/download_topics.py"
