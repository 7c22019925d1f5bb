# BGE-M3's multi-vector rerank and weighted fusion, per model of the bge-m3 family. Component
# scores are computed exactly for every candidate and kept, so that new fusion weights re-run
# only `fuse` and evaluation. The union's scores come from the stored vectors (a CPU job reading
# the row groups its candidates live in); the rerank's from one encoding of each candidate passage.

from miracl_eval.encoders.registry import models_with
from miracl_eval.fusion.weighted import FUSED_COMPONENTS, fused_depth

M3_MODELS = _alternatives(models_with(MODELS, "multivec"))


rule union_components:
    input:
        dense_run=path("run", system="{model}/dense"),
        sparse_run=path("run", system="{model}/sparse"),
        queries=PATHS["queries"],
        query_dense=path("encoded_queries", kind="dense"),
        query_sparse=path("encoded_queries", kind="sparse"),
        corpus=part_corpus(PATHS["corpus"]),
        blocks=corpus_blocks,
    output:
        path("scores", kind="union"),
    log:
        log_path("union_components/{model}/{part}/{chunk}"),
    benchmark:
        benchmark_path("union_components/{model}/{part}/{chunk}")
    wildcard_constraints:
        model=M3_MODELS,
    conda:
        "../envs/encode.yaml"
    threads: 1
    resources:
        **request("union_components"),
    params:
        chunk_size=config["query_chunk"],
        passage_dense=corpus_shards("dense"),
        passage_sparse=corpus_shards("sparse"),
    script:
        "../scripts/union_components.py"


rule rerank_components:
    input:
        dense_run=path("run", system="{model}/dense"),
        queries=PATHS["queries"],
        corpus=part_corpus(PATHS["corpus"]),
        query_dense=path("encoded_queries", kind="dense"),
        query_sparse=path("encoded_queries", kind="sparse"),
        model=model_input,
    output:
        path("scores", kind="rerank"),
    log:
        log_path("rerank_components/{model}/{part}/{chunk}"),
    benchmark:
        benchmark_path("rerank_components/{model}/{part}/{chunk}")
    wildcard_constraints:
        model=M3_MODELS,
    conda:
        "../envs/encode.yaml"
    threads: ENCODE_THREADS
    resources:
        **request("rerank_components"),
        gpu=GPU,
    params:
        depth=model_setting("rerank_depth"),
        chunk_size=config["query_chunk"],
        spec=encoder_spec(),
        device=ENC["device"],
        dtype=ENC["dtype"],
    script:
        "../scripts/rerank_components.py"


rule fuse:
    input:
        fusion_components,
    output:
        run=path("run", system="{model}/{method}"),
        trec=path("trec", system="{model}/{method}"),
        components=path("components", system="{model}/{method}"),
    log:
        log_path("fuse/{model}/{part}/{method}"),
    benchmark:
        benchmark_path("fuse/{model}/{part}/{method}")
    wildcard_constraints:
        model=M3_MODELS,
        method=_alternatives(FUSED),
    conda:
        "../envs/eval.yaml"
    threads: 1
    resources:
        **request("fuse"),
    params:
        weights=lambda wc: {
            c: MODELS[wc.model]["weights"][c] for c in FUSED_COMPONENTS[wc.method]
        },
        depth=lambda wc: fused_depth(
            wc.method, config["hits"], MODELS[wc.model]["rerank_depth"]
        ),
        tag=lambda wc: f"{wc.model}/{wc.method}",
    script:
        "../scripts/fuse.py"
