# Downloads from the Hugging Face hub; used only when the config has no local `source`. The release of
# the topics and qrels (data_version) is resolved for every run: from the hub's file list, or as declared.

# the release of the topics and qrels asked for: MIRACL's is fixed, MessIRve's a setting
VERSION_SETTING = DATASET.version or config["hub"]["messirve_version"]


rule download_corpus:
    output:
        directory(PATHS["downloaded_corpus"]),
    log:
        log_path("download_corpus/{corpus}"),
    benchmark:
        benchmark_path("download_corpus/{corpus}")
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
        log_path("data_version"),
    benchmark:
        benchmark_path("data_version")
    conda:
        "../envs/data.yaml"
    threads: 1
    resources:
        **request("small"),
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
        topics=PATHS["downloaded_topics"],
        qrels=PATHS["downloaded_qrels"],
    log:
        log_path("download_topics/{part}"),
    benchmark:
        benchmark_path("download_topics/{part}")
    conda:
        "../envs/data.yaml"
    threads: 1
    resources:
        **request("download"),
    params:
        split=config["split"],
        revision=config["hub"]["revision"],
        cache_dir=config["hub"]["cache_dir"],
        topics_from=config["hub"]["topics_from"],
    script:
        "../scripts/download_topics.py"
