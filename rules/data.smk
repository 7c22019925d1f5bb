# Downloads from the Hugging Face hub; used only when the config has no local `source`. The release of
# the topics and qrels (data_version) is resolved for every run: from the hub's file list, or as declared.


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


rule data_version:
    output:
        PATHS["data_version"],
    log:
        "logs/{dataset}/data_version.log",
    benchmark:
        "stats/{dataset}/data_version.tsv"
    conda:
        "../envs/data.yaml"
    threads: 1
    resources:
        mem_mb=1000,
    params:
        setting=VERSION_SETTING,
        from_hub=not SOURCE,
        revision=config["hub"]["revision"],
    script:
        "../scripts/data_version.py"


rule download_topics:
    input:
        version=PATHS["data_version"],
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
