"""Declarative dataset records: what differs between MIRACL and MessIRve is data, not code.

Every stage of the workflow is shared; a dataset only says which partitions it has (the
"language" axis of the result tables), which corpus each partition searches, which Lucene
analyzer to use, how titles are joined to passages, and where the hub keeps its files.
"""

from __future__ import annotations

from dataclasses import dataclass

MIRACL_LANGUAGES: tuple[str, ...] = (
    "ar", "bn", "en", "es", "fa", "fi", "fr", "hi", "id",
    "ja", "ko", "ru", "sw", "te", "th", "zh", "de", "yo",
)  # fmt: skip

MESSIRVE_COUNTRIES: tuple[str, ...] = (
    "ar", "bo", "cl", "co", "cr", "cu", "do", "ec", "es", "gt", "hn",
    "mx", "ni", "pa", "pe", "pr", "py", "sv", "us", "uy", "ve",
)  # fmt: skip


@dataclass(frozen=True)
class HubConfigs:
    """The config names (templates with ``{part}``) of an MTEB retrieval dataset on the hub."""

    corpus: str = "{part}-corpus"
    queries: str = "{part}-queries"
    qrels: str = "{part}-qrels"


@dataclass(frozen=True)
class HubFiles:
    """Where the Hugging Face hub keeps a dataset's files.

    Templates take ``{part}`` (partition), ``{split}`` and ``{version}`` (the release of the topics
    and qrels). The corpus files are those of ``corpus_repo`` whose path starts with
    ``corpus_prefix`` (which may use ``{part}``) and ends with one of ``corpus_suffix``.
    """

    corpus_repo: str
    corpus_prefix: str
    corpus_suffix: tuple[str, ...]
    topics_repo: str
    topics_file: str
    qrels_file: str
    #: a regular expression whose group ``version`` finds the releases among the file names of
    #: ``topics_repo``; None when the dataset's ``version`` is fixed
    version_pattern: str | None = None
    #: an MTEB dataset: corpus, queries and qrels are configs of the repository, read as the ``datasets``
    #: library reads them (:mod:`miracl_eval.inputs.hub_card`) in place of the prefixes and files above
    configs: HubConfigs | None = None


@dataclass(frozen=True)
class Dataset:
    name: str
    partitions: tuple[str, ...]
    default_split: str
    title_join: str
    hub: HubFiles
    #: partition -> corpus key; partitions not listed use ``shared_corpus`` or themselves
    shared_corpus: str | None = None
    #: Lucene analyzer language for every corpus (None: the corpus key is the language)
    language: str | None = None
    #: whether the result tables get a ``mean`` column over the partitions
    mean_column: bool = True
    #: the release of the topics and qrels when the hub's file names fix it; None: resolved from
    #: the hub's file list (``hub.version_pattern``, setting ``hub.messirve_version``)
    version: str | None = None
    #: the task instruction an instruction-tuned model's queries get (``{task}`` of a model's
    #: ``query_template``) unless the model's ``query_instruction`` says otherwise
    query_instruction: str = ""
    #: the hub revision downloads use unless ``hub.revision`` names another (None: the repository's main)
    revision: str | None = None
    #: whether a passage's joined text (``contents``) is stripped of the whitespace around it, as MTEB's
    #: loader strips ``title + " " + text`` (``mteb/_create_dataloaders.py``)
    strip_passages: bool = False
    #: other revisions (of this hub repository or of the one it replaced) known to hold the same data as
    #: ``revision``: a number published at one of them is of the data a run at ``revision`` reads
    same_data: tuple[str, ...] = ()

    def same_revision_data(self, ours: object, theirs: str) -> bool:
        """Whether a run at hub revision ``ours`` reads the data of a number computed at ``theirs``."""
        if ours == theirs:
            return True
        known = {self.revision, *self.same_data} - {None}
        return str(ours) in known and theirs in known

    def revision_to_pin(self, theirs: str) -> str:
        """The ``hub.revision`` whose download is the data of a number computed at ``theirs``."""
        return self.revision if self.revision and theirs in self.same_data else theirs

    def corpus_of(self, partition: str) -> str:
        """The corpus that a partition's queries are searched against."""
        return self.shared_corpus if self.shared_corpus is not None else partition

    def corpora(self, partitions: list[str] | tuple[str, ...]) -> list[str]:
        """The distinct corpora needed by ``partitions``, in order of first use."""
        return list(dict.fromkeys(self.corpus_of(p) for p in partitions))

    def analyzer_language(self, corpus: str) -> str:
        return self.language if self.language is not None else corpus


#: MTEB's prompt for MIRACL (``MIRACLRetrieval``'s and ``MIRACLRetrieval.v2``'s ``prompt["query"]``,
#: mteb 2.26 ``tasks/retrieval/multilingual/miracl_retrieval.py``; e5-mistral's and Qwen3-Embedding's
#: instruction for MIRACL). MTEB has no MessIRve task: its queries are questions that Spanish
#: Wikipedia paragraphs answer, the task this instruction names, so MessIRve takes it too.
WIKIPEDIA_QA_INSTRUCTION = "Given a question, retrieve Wikipedia passages that answer the question"

MIRACL = Dataset(
    name="miracl",
    partitions=MIRACL_LANGUAGES,
    default_split="dev",
    # pyserini's MIRACL indexes and FlagEmbedding's MIRACL scripts both use "title text".
    title_join="{title} {text}",
    hub=HubFiles(
        corpus_repo="miracl/miracl-corpus",
        corpus_prefix="miracl-corpus-v1.0-{part}/",
        corpus_suffix=(".jsonl.gz",),
        topics_repo="miracl/miracl",
        topics_file="miracl-v1.0-{part}/topics/topics.miracl-v1.0-{part}-{split}.tsv",
        qrels_file="miracl-v1.0-{part}/qrels/qrels.miracl-v1.0-{part}-{split}.tsv",
    ),
    version="v1.0",
    query_instruction=WIKIPEDIA_QA_INSTRUCTION,
)

MESSIRVE = Dataset(
    name="messirve",
    partitions=("full", "no_country", *MESSIRVE_COUNTRIES),
    default_split="test",
    # Valentini et al. (2024) prepend the article title to the paragraph with ". ".
    title_join="{title}. {text}",
    hub=HubFiles(
        corpus_repo="spanish-ir/eswiki_20240401_corpus",
        corpus_prefix="",
        # the hub's data files (Parquet as converted by the hub, or the uploaded JSONL)
        corpus_suffix=(".parquet", ".jsonl", ".jsonl.gz"),
        topics_repo="spanish-ir/messirve-trec",
        # the hub holds several releases side by side (messirve-v0.1-*, May 2024; the paper's v1.0)
        topics_file="topics.messirve-{version}-{part}-{split}.tsv",
        qrels_file="qrels.messirve-{version}-{part}-{split}.tsv",
        version_pattern=r"^(?:topics|qrels)\.messirve-(?P<version>v[0-9]+(?:\.[0-9]+)*)-",
    ),
    shared_corpus="eswiki",
    language="es",
    mean_column=False,
    query_instruction=WIKIPEDIA_QA_INSTRUCTION,
)

#: the hub revision of mteb/MIRACLRetrievalHardNegatives that MTEB pins (mteb 2.26,
#: tasks/retrieval/multilingual/miracl_retrieval.py: MIRACLRetrievalHardNegatives and its .v2, the same data)
MIRACL_HN_REVISION = "d7d94fa4b946cec4a27c84653aa0cf6b33f74a3c"
#: the revision MTEB pinned before 2.0 (mteb 1.x, of the repository mteb/miracl-hard-negatives, read by a loader
#: of its own that took bn, sw and yo whole from miracl/mmteb-miracl): most of MTEB's published results are of it.
#: MTEB 2.0 re-uploaded what that loader read as mteb/MIRACLRetrievalHardNegatives, d7d94fa4 (mteb PR #3161:
#: ``task.push_dataset_to_hub``, whose ``{lang}-corpus/-queries/-qrels`` layout d7d94fa4 has): the same data. The
#: results repository agrees: deterministic systems scored at both revisions give the same values (see
#: data/published/SOURCES.md, mteb_miracl_hn.tsv).
MIRACL_HN_MTEB1_REVISION = "95c8db7d4a6e9c1d8a60601afd63d553ae20a2eb"

MIRACL_HN = Dataset(
    name="miracl-hn",
    partitions=MIRACL_LANGUAGES,
    default_split="dev",
    # MTEB's documents: (title + " " + text).strip(), the title only when there is one (_create_dataloaders.py)
    title_join="{title} {text}",
    hub=HubFiles(
        corpus_repo="mteb/MIRACLRetrievalHardNegatives",
        corpus_prefix="",
        corpus_suffix=(".parquet",),
        topics_repo="mteb/MIRACLRetrievalHardNegatives",
        topics_file="",
        qrels_file="",
        # MTEB loads the configs {lang}-corpus, {lang}-queries and {lang}-qrels (retrieval_dataset_loaders.py)
        configs=HubConfigs(),
    ),
    version=MIRACL_HN_REVISION,
    query_instruction=WIKIPEDIA_QA_INSTRUCTION,
    revision=MIRACL_HN_REVISION,
    strip_passages=True,
    same_data=(MIRACL_HN_MTEB1_REVISION,),
)

DATASETS: dict[str, Dataset] = {d.name: d for d in (MIRACL, MESSIRVE, MIRACL_HN)}


def get_dataset(name: str) -> Dataset:
    try:
        return DATASETS[name]
    except KeyError:
        raise KeyError(f"unknown dataset '{name}'; valid: {', '.join(DATASETS)}") from None
