# The run: the validated config read once into the names that every rule file uses: the dataset, its
# partitions and corpora, the table's rows and the models, rerankers and hybrids they use, the encoder's
# settings. Included first; the Snakefile has validated `config` before.

from miracl_eval.config.systems import (
    first_stages,
    systems,
    training,
    used_hybrids,
    used_models,
    used_rerankers,
)
from miracl_eval.evaluation.metrics import MEASURES
from miracl_eval.fusion.weighted import FUSED_COMPONENTS
from miracl_eval.inputs.datasets import get_dataset
from miracl_eval.lucene.release import engine_facts, pyserini_release
from snakemake.settings.types import DeploymentMethod

DATASET = get_dataset(config["dataset"])
# what the rows are matched on beside the configuration when compared with published numbers: the
# pyserini release the Lucene jobs run (its 2CR references change between releases)
ENGINE_FACTS = engine_facts(
    pyserini_release(
        workflow.basedir,
        DeploymentMethod.CONDA in workflow.deployment_settings.deployment_method,
    )
)
PARTS = list(config["languages"])
CORPORA = DATASET.corpora(PARTS)
MEASURE_KEYS = [m.key for m in MEASURES]
SOURCE = config.get("source")
ENC = config["encoder"]
DENSE_INDEX = config["dense_index"]

#: the table rows (bm25, {model}/{method}, hybrids), in the config's order; labels are also paths
SYSTEMS = systems(config)
# per row: zero-shot, in-domain (its model trained on this dataset's training split) or unknown
ROW_TRAINING = training(config)
METHODS = [s.label for s in SYSTEMS]
# what the rows use, rows and first stages of reranked rows alike (a configured model, hybrid or reranker
# that no row uses gets no jobs): resolved specs by name, and the labels whose top hits some reranker reranks
MODELS = used_models(config)
HYBRIDS = used_hybrids(config)
RERANKERS = used_rerankers(config)
FIRST_STAGES = first_stages(config)
FUSED = list(FUSED_COMPONENTS)
