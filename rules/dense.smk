# Dense retrieval for every model that stores dense vectors. Exact search (`dense_index.type: flat`,
# the default: the paper's) runs in blocks of `dense_index.block_size` passages, one job per block
# for every partition of its corpus (on the job's GPU when it holds one, whatever the view's storage),
# each keeping every query's top `hits` and all ties of the last; one merge per partition then ranks
# them as one flat index would (miracl_eval/faiss/blocks.py). No job holds more than a block's vectors,
# in its view's storage, and no index of the whole corpus is written. The approximate indexes (hnsw,
# ivfpq) are built whole and searched with Faiss, on a GPU only when GPU Faiss is installed.

from miracl_eval.encoders.registry import models_with

if DENSE_INDEX["type"] == "flat":

    rule int8_ranges:
        input:
            corpus_blocks,
        output:
            PATHS["int8_ranges"],
        log:
            log_path("int8_ranges/{model}/{corpus}"),
        benchmark:
            benchmark_path("int8_ranges/{model}/{corpus}")
        wildcard_constraints:
            model=_alternatives(models_with(MODELS, "dense")),
        conda:
            "../envs/encode.yaml"
        threads: 1
        resources:
            **request("int8_ranges"),
        params:
            shards=corpus_shards("dense"),
            view=search_view,
            sample=lambda wc: MODELS[wc.model]["calibration_passages"],
        script:
            "../scripts/int8_ranges.py"

    rule dense_block_search:
        input:
            blocks=corpus_blocks,
            queries=lambda wc: expand(
                path("encoded_queries", kind="dense"),
                dataset=wc.dataset,
                model=encoded_model(wc.model),
                part=corpus_parts(wc.corpus),
            ),
            ranges=int8_ranges,
        output:
            PATHS["dense_block"],
        log:
            log_path("dense_block_search/{model}/{corpus}/{block}"),
        benchmark:
            benchmark_path("dense_block_search/{model}/{corpus}/{block}")
        wildcard_constraints:
            model=_alternatives(models_with(MODELS, "dense")),
        conda:
            "../envs/encode.yaml"
        threads: config["threads"]
        resources:
            **request("dense_block_search"),
            gpu=GPU,  # every storage is scored on the job's GPU (miracl_eval.faiss.storage)
        params:
            shards=block_shard_files,
            parts=lambda wc: corpus_parts(wc.corpus),
            hits=config["hits"],
            device=ENC["device"],
            view=search_view,
            rescore=lambda wc: MODELS[wc.model].get("rescore", 0),
        script:
            "../scripts/dense_block_search.py"

    rule dense_merge:
        input:
            search_blocks,
        output:
            run=path("run", system="{model}/dense"),
            trec=path("trec", system="{model}/dense"),
        log:
            log_path("dense_merge/{model}/{part}"),
        benchmark:
            benchmark_path("dense_merge/{model}/{part}")
        wildcard_constraints:
            model=_alternatives(models_with(MODELS, "dense")),
        conda:
            "../envs/encode.yaml"
        threads: 1
        resources:
            **request("dense_merge"),
        params:
            hits=config["hits"],
            tag=lambda wc: f"{wc.model}/dense",
            rescore=lambda wc: MODELS[wc.model].get("rescore", 0),
        script:
            "../scripts/dense_merge.py"

else:

    rule dense_index:
        input:
            corpus_blocks,
        output:
            index=PATHS["dense_index"],
            docids=PATHS["dense_docids"],
        log:
            log_path("dense_index/{model}/{corpus}"),
        benchmark:
            benchmark_path("dense_index/{model}/{corpus}")
        wildcard_constraints:
            model=_alternatives(models_with(MODELS, "dense")),
        conda:
            "../envs/encode.yaml"
        threads: config["threads"]
        resources:
            **request("dense_index"),
            gpu=GPU_FAISS if DENSE_INDEX["type"] == "ivfpq" else 0,
        params:
            shards=corpus_shards("dense"),
            index_type=DENSE_INDEX["type"],
            hnsw_m=DENSE_INDEX["hnsw_m"],
            ivf_lists=DENSE_INDEX["ivf_lists"],
            pq_m=DENSE_INDEX["pq_m"],
            use_gpu=DENSE_INDEX["gpu"],
        script:
            "../scripts/dense_index.py"

    rule dense_search:
        input:
            index=part_corpus(PATHS["dense_index"]),
            docids=part_corpus(PATHS["dense_docids"]),
            queries=path("encoded_queries", kind="dense"),
        output:
            run=path("run", system="{model}/dense"),
            trec=path("trec", system="{model}/dense"),
        log:
            log_path("dense_search/{model}/{part}"),
        benchmark:
            benchmark_path("dense_search/{model}/{part}")
        wildcard_constraints:
            model=_alternatives(models_with(MODELS, "dense")),
        conda:
            "../envs/encode.yaml"
        threads: config["threads"]
        resources:
            **request("dense_search"),
            gpu=GPU_FAISS,
        params:
            hits=config["hits"],
            use_gpu=DENSE_INDEX["gpu"],
            nprobe=DENSE_INDEX["nprobe"],
            ef_search=DENSE_INDEX["hnsw_ef_search"],
            tag=lambda wc: f"{wc.model}/dense",
        script:
            "../scripts/dense_search.py"
