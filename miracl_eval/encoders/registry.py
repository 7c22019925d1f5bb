"""The model families and their settings: the one place where a family is registered.

Imported when the Snakefile is parsed, so it imports neither torch nor transformers: a family
names the module that loads it (:attr:`Family.module`), imported only by :meth:`Family.load`.

A model's settings are :data:`COMMON_SETTINGS` plus its family's own :attr:`Family.settings`,
both JSON-schema ``properties``; :meth:`Family.resolve` checks a model's settings and fills in
every default, giving the *spec* that the encoders and stages take: a plain dict
``{"family": ..., "checkpoint": ..., <every common and family setting>}``.
"""

from __future__ import annotations

import copy
import importlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from miracl_eval.encoders.checkpoints import REVISION_PATTERN, pinned_revision
from miracl_eval.errors import ConfigError
from miracl_eval.inputs.preprocess import check_template

if TYPE_CHECKING:
    from miracl_eval.encoders.base import Encoder


def _max_length(role: str) -> dict[str, Any]:
    return {
        "type": "integer",
        "minimum": 8,
        "default": 512,
        "description": f"{role} tokens kept, the tokenizer's special tokens included (longer {role}s are truncated)",
    }


#: the hub revision of a model whose weights are fetched (not an API's): part of what its outputs depend on
REVISION_SETTING: Mapping[str, Any] = {
    "revision": {
        "type": ["string", "null"],
        "pattern": REVISION_PATTERN,
        "default": None,
        "description": (
            "the hub revision of the checkpoint: a commit, a tag or a branch; null: the hub's main when it is "
            "fetched. Fetched once into its own folder, the 40-hex commit recorded (settings page, the effective "
            "config, MTEB's model_meta.json); a new revision fetches and encodes again. Only for a hub id"
        ),
    },
}


def _from_checkpoint_max_length(role: str) -> dict[str, Any]:
    return {
        "type": ["integer", "null"],
        "minimum": 8,
        "default": None,
        "description": (
            f"{role} tokens kept, the tokenizer's special tokens included (longer {role}s are truncated); left "
            "out: the checkpoint's sentence-transformers truncation (sentence_bert_config.json's max_seq_length, "
            f"{'query_length' if role == 'query' else 'document_length'}, or the tokenizer's model_max_length "
            "capped at the positions), else 512. A longer one than the checkpoint's is honoured, up to the "
            "model's positions"
        ),
    }


#: how a dense model's vectors are searched (miracl_eval.faiss.storage): settings read after encoding, so
#: that views of one encoding (``view_of``) are rows of one run
VIEW_SETTINGS: Mapping[str, Any] = {
    "view_of": {
        "type": ["string", "null"],
        "default": None,
        "description": (
            "another model of this run whose encodings this one searches (its settings are that model's; only "
            "dimensions, storage and calibration_passages may differ): no text is encoded again"
        ),
    },
    "dimensions": {
        "type": ["integer", "null"],
        "minimum": 1,
        "default": None,
        "description": (
            "search the first N dimensions of the vectors (Matryoshka), normalised again when the model "
            "normalises; left out: all. Wider than the encoded vectors: the view's jobs stop naming it"
        ),
    },
    "storage": {
        "type": "string",
        "enum": ["float32", "float16", "int8", "binary"],
        "default": "float32",
        "description": (
            "how the passage vectors are held for the exact search: float32, float16, int8 (per-dimension "
            "ranges calibrated on a sample of the corpus) or binary (sign bits, scored by Hamming distance)"
        ),
    },
    "calibration_passages": {
        "type": "integer",
        "minimum": 1,
        "default": 100_000,
        "description": (
            "passages of a corpus (taken evenly over it) whose ranges calibrate int8 storage (all of a smaller "
            "corpus); given for other storage, an error"
        ),
    },
    "rescore": {
        "type": "integer",
        "minimum": 0,
        "default": 0,
        "description": (
            "float16, int8 or binary storage: the top N hits by the stored vectors' scores are ranked again by "
            "the float32 query and passage vectors (the run holds at most N hits; N above hits: the top hits of "
            "N ranked); 0: no rescoring"
        ),
    },
}


#: the search settings of a model whose vectors are searched as encoded; other values make a row a view of it
SEARCHED_AS_ENCODED: Mapping[str, Any] = {k: VIEW_SETTINGS[k]["default"] for k in ("dimensions", "storage", "rescore")}


def _quantization(scale: float, rounding: str, description: str) -> dict[str, Any]:
    return {
        "type": "object",
        "additionalProperties": False,
        "description": description,
        "properties": {
            "scale": {
                "type": "number",
                "exclusiveMinimum": 0,
                "default": scale,
                "description": "a weight w is stored as the integer impact rounding(w * scale); impacts <= 0 are dropped",
            },
            "rounding": {
                "type": "string",
                "enum": ["ceil", "round"],
                "default": rounding,
                "description": "ceil: math.ceil; round: Python's round (halves to even), as pyserini",
            },
        },
        "default": {"scale": scale, "rounding": rounding},
    }


#: OpenAI's embeddings API: its base URL, and its limits on one request (API reference,
#: ``CreateEmbeddingRequest.input``: inputs, tokens per input, tokens summed over the inputs)
OPENAI_URL = "https://api.openai.com/v1"
MAX_INPUTS, MAX_INPUT_TOKENS, MAX_REQUEST_TOKENS = 2048, 8192, 300_000

#: JSON-schema properties of the settings every family has (``checkpoint`` is required).
COMMON_SETTINGS: Mapping[str, Any] = {
    "checkpoint": {
        "type": "string",
        "minLength": 1,
        "description": "the model: a Hugging Face hub id or a local checkpoint folder",
    },
    "query_max_length": _max_length("query"),
    "passage_max_length": _max_length("passage"),
    "trained_on": {
        "type": ["array", "null"],
        "items": {"type": "string", "enum": ["miracl", "messirve"]},
        "uniqueItems": True,
        "default": None,
        "description": (
            "the datasets whose training split the model was trained on (its rows on them are in-domain, not "
            "zero-shot); [] = none; null = unknown. Presets give it with its source; it changes no encoding"
        ),
    },
    "title_join": {
        "type": ["string", "null"],
        "default": None,
        "description": (
            "how a passage's title and text become the encoded text: null = the corpus's `contents` column "
            "(the dataset's join); a template such as '{title} {text}' joins the `title` and `text` columns "
            "(a passage without a title keeps its text)"
        ),
    },
}


@dataclass(frozen=True)
class Family:
    """A model family: the methods it offers, what it stores per text, its settings and its module."""

    name: str
    #: the table-row methods a model of this family offers
    methods: tuple[str, ...]
    #: what is stored per text, a subset of ("dense", "sparse") in that order
    outputs: tuple[str, ...]
    #: JSON-schema properties of the family's own settings, each with a default and a description
    settings: Mapping[str, Any]
    #: import path of the module that defines ``load(spec, device, dtype) -> Encoder``
    module: str
    #: the family's defaults for some of :data:`COMMON_SETTINGS`
    common_defaults: Mapping[str, Any] = field(default_factory=dict)
    #: the family's own properties of some of :data:`COMMON_SETTINGS` (replacing them whole)
    common_properties: Mapping[str, Any] = field(default_factory=dict)
    #: settings read only after encoding (indexing, fusion): changing them never re-encodes
    retrieval_settings: tuple[str, ...] = ()
    #: settings that change how (fast, at what cost) the texts are encoded, not the encodings
    throughput_settings: tuple[str, ...] = ()
    #: whether its models run behind an HTTP API (no torch, no GPU: the jobs run on CPUs)
    remote: bool = False

    def properties(self) -> dict[str, Any]:
        """Every setting's JSON-schema property: the common ones (with this family's defaults) and its own."""
        props = copy.deepcopy(dict(COMMON_SETTINGS))
        for key, value in self.common_defaults.items():
            props[key]["default"] = value
        props.update(copy.deepcopy(dict(self.common_properties)))
        props.update(copy.deepcopy(dict(self.settings)))
        return props

    def schema(self) -> dict[str, Any]:
        """The JSON schema of a model's settings (``family`` may be given; ``checkpoint`` must be)."""
        return {
            "type": "object",
            "additionalProperties": False,
            "required": ["checkpoint"],
            "properties": {"family": {"const": self.name, "description": "the model family"}, **self.properties()},
        }

    def resolve(self, settings: Mapping[str, Any], key: str = "models") -> dict[str, Any]:
        """The spec of a model with these settings: checked against :meth:`schema`, every default filled in.

        Raises :class:`ConfigError` naming ``key`` and the offending setting (``models.my-e5.pooling``).
        """
        import jsonschema  # here, not at the top: loading a family's model needs no validator

        spec = copy.deepcopy({"family": self.name, **settings})
        errors = sorted(
            jsonschema.Draft202012Validator(self.schema()).iter_errors(spec),
            key=lambda e: (len(e.absolute_path), [str(p) for p in e.absolute_path]),
        )
        if errors:
            err = errors[0]
            path = [key, *map(str, err.absolute_path)]
            if err.validator == "required":
                path.append(next(name for name in err.validator_value if name not in err.instance))
                raise ConfigError(".".join(path), "is required")
            raise ConfigError(".".join(path), err.message)
        _fill_defaults(spec, self.properties())
        if spec["title_join"] is not None:
            try:
                check_template(spec["title_join"])
            except ValueError as err:
                raise ConfigError(f"{key}.title_join", str(err)) from None
        return spec

    def load(self, spec: Mapping[str, Any], device: str = "auto", dtype: str = "auto") -> Encoder:
        """Load the encoder of a resolved ``spec`` (imports the family's module, and so torch)."""
        if spec.get("family") != self.name:
            raise ValueError(f"spec of family {spec.get('family')!r} given to the {self.name!r} family")
        module = importlib.import_module(self.module)
        return module.load(spec, device=device, dtype=dtype)


def _fill_defaults(value: dict[str, Any], properties: Mapping[str, Any]) -> None:
    for key, prop in properties.items():
        if key not in value and "default" in prop:
            value[key] = copy.deepcopy(prop["default"])
        if isinstance(value.get(key), dict) and "properties" in prop:
            _fill_defaults(value[key], prop["properties"])


def _weight(default: float, component: str) -> dict[str, Any]:
    return {"type": "number", "default": default, "description": f"weight of the {component} score in fusion"}


FAMILIES: Mapping[str, Family] = {
    "bge-m3": Family(
        name="bge-m3",
        methods=("dense", "sparse", "multivec", "dense+sparse", "all"),
        outputs=("dense", "sparse"),
        settings={
            "weights": {
                "type": "object",
                "additionalProperties": False,
                "description": "fusion weights of the three scores (the BGE-M3 paper's 1, 0.3, 1)",
                "properties": {
                    "dense": _weight(1.0, "dense"),
                    "sparse": _weight(0.3, "lexical (sparse)"),
                    "multivec": _weight(1.0, "multi-vector"),
                },
                "default": {"dense": 1.0, "sparse": 0.3, "multivec": 1.0},
            },
            "rerank_depth": {
                "type": "integer",
                "minimum": 1,
                "default": 200,
                "description": "dense candidates re-scored by the multi-vector scorer (multivec and all)",
            },
            "quantization": _quantization(100, "ceil", "lexical weights into the impact index: ceil(w * 100)"),
            **REVISION_SETTING,
        },
        module="miracl_eval.encoders.bge_m3",
        common_defaults={"query_max_length": 256, "passage_max_length": 512},
        retrieval_settings=("weights", "rerank_depth", "quantization"),
    ),
    "dense": Family(
        name="dense",
        methods=("dense",),
        outputs=("dense",),
        settings={
            "pooling": {
                "type": ["string", "null"],
                "enum": ["cls", "mean", "last", "lasttoken", "max", "mean_sqrt_len_tokens", "weightedmean", None],
                "default": None,
                "description": (
                    "cls: the first token's state; mean: the mean over the text's tokens (attention mask); "
                    "last: the last token's state, the text ending with the tokenizer's EOS token "
                    "(appended when the tokenizer does not add it), as E5-mistral; lasttoken, max, "
                    "mean_sqrt_len_tokens, weightedmean: sentence-transformers' modes (lasttoken: the last token, "
                    "nothing appended); left out: the checkpoint's sentence-transformers Pooling module "
                    "(1_Pooling/config.json), else an error"
                ),
            },
            "normalize": {
                "type": ["boolean", "null"],
                "default": None,
                "description": (
                    "L2-normalize the vectors; left out: whether the checkpoint's sentence-transformers "
                    "modules.json has a Normalize module (an error without modules.json)"
                ),
            },
            "query_prefix": {
                "type": ["string", "null"],
                "default": None,
                "description": (
                    "prepended to every query; left out: the checkpoint's sentence-transformers prompt named "
                    "query (config_sentence_transformers.json), else none"
                ),
            },
            "passage_prefix": {
                "type": ["string", "null"],
                "default": None,
                "description": (
                    "prepended to every passage; left out: the checkpoint's sentence-transformers prompt named "
                    "document or passage, else none"
                ),
            },
            "query_template": {
                "type": ["string", "null"],
                "pattern": "\\{query\\}",
                "default": None,
                "description": (
                    "a query instruction such as 'Instruct: {task}\\nQuery: {query}', every {query} replaced "
                    "by the query and every {task} by query_instruction (in one pass); no other braces; when "
                    "set, query_prefix is not used"
                ),
            },
            "query_instruction": {
                "type": ["string", "null"],
                "default": None,
                "description": (
                    "the task description put in place of {task} in query_template, as written (not empty); left "
                    "out: the dataset's (MTEB's prompt for MIRACL). Changing it re-encodes the queries only"
                ),
            },
            **REVISION_SETTING,
            **VIEW_SETTINGS,
        },
        module="miracl_eval.encoders.dense",
        common_properties={
            "query_max_length": _from_checkpoint_max_length("query"),
            "passage_max_length": _from_checkpoint_max_length("passage"),
        },
        retrieval_settings=tuple(VIEW_SETTINGS),
    ),
    "openai": Family(
        name="openai",
        methods=("dense",),
        outputs=("dense",),
        settings={
            "base_url": {
                "type": "string",
                "pattern": "^https?://",
                "default": OPENAI_URL,
                "description": (
                    "the API's base URL (OpenAI's, or an OpenAI-compatible server's: vLLM, TEI, infinity, Ollama, "
                    "LiteLLM); https:// or a loopback address unless allow_insecure"
                ),
            },
            "api_key_env": {
                "type": "string",
                "minLength": 1,
                "default": "OPENAI_API_KEY",
                "description": "the environment variable holding the API key (read by the jobs, written nowhere)",
            },
            "allow_insecure": {
                "type": "boolean",
                "default": False,
                "description": "accept a base_url that is neither https:// nor loopback (the key travels in clear)",
            },
            "dimensions": {
                "type": ["integer", "null"],
                "minimum": 1,
                "default": None,
                "description": (
                    "passed to the API (text-embedding-3's shortened vectors); null: the model's own. In a view "
                    "(view_of), the first N dimensions of its model's encodings, normalised again"
                ),
            },
            **{k: v for k, v in VIEW_SETTINGS.items() if k != "dimensions"},
            "query_prefix": {"type": "string", "default": "", "description": "prepended to every query"},
            "passage_prefix": {"type": "string", "default": "", "description": "prepended to every passage"},
            "tokenizer": {
                "type": ["string", "null"],
                "default": None,
                "description": (
                    "what counts and cuts inputs to the max lengths: tiktoken:ENCODING or a Hugging Face tokenizer "
                    "(folder or hub id); null: tiktoken's for OpenAI's models, else nothing is counted or cut"
                ),
            },
            "inputs_per_request": {
                "type": "integer",
                "minimum": 1,
                "maximum": MAX_INPUTS,
                "default": 256,
                "description": f"texts per request at most (OpenAI's limit: {MAX_INPUTS:,})",
            },
            "tokens_per_request": {
                "type": "integer",
                "minimum": 1,
                "default": MAX_REQUEST_TOKENS,
                "description": f"tokens summed over a request's texts at most (OpenAI's limit: {MAX_REQUEST_TOKENS:,})",
            },
            "concurrency": {"type": "integer", "minimum": 1, "default": 8, "description": "requests in flight a job"},
            "tokens_per_minute": {
                "type": ["integer", "null"],
                "minimum": 1,
                "default": None,
                "description": (
                    "the provider's token rate limit for this model and key (OpenAI's presets: tier 1's 1,000,000);"
                    " the model's running jobs together keep under it, each to 1/api_jobs of it. null: no pace of "
                    "the client's own (the provider's x-ratelimit headers and 429s still pace it)"
                ),
            },
            "requests_per_minute": {
                "type": ["integer", "null"],
                "minimum": 1,
                "default": None,
                "description": "the provider's request rate limit, kept to as tokens_per_minute is (null: none)",
            },
            "api_jobs": {
                "type": "integer",
                "minimum": 1,
                "default": 4,
                "description": (
                    "the most encoding jobs of this model that run at once (a Snakemake resource the workflow "
                    "declares, api_<model>); each keeps to 1/api_jobs of tokens_per_minute and requests_per_minute"
                ),
            },
            "patience": {
                "type": "number",
                "exclusiveMinimum": 0,
                "default": 1800,
                "description": (
                    "seconds a job goes on without an answered request (429s waited out, Retry-After however "
                    "long, 5xx retried) before it fails; a pause asked for beyond it fails at once"
                ),
            },
            "max_retries": {
                "type": "integer",
                "minimum": 0,
                "default": 8,
                "description": (
                    "retries of a request after a 5xx, a timeout, a dropped connection or an answer cut short (a 429 "
                    "is waited out instead, within patience)"
                ),
            },
            "timeout": {
                "type": "number",
                "exclusiveMinimum": 0,
                "default": 120,
                "description": "seconds a request waits for its answer's start, and for all of it",
            },
            "price_per_million_tokens": {
                "type": "number",
                "minimum": 0,
                "default": 0,
                "description": "US dollars per 1M input tokens (OpenAI's presets give theirs, with the source)",
            },
            "max_usd": {
                "type": "number",
                "minimum": 0,
                "default": 0,
                "description": (
                    "the most the model's encodings may cost: a run whose plan (tokens x price) is over it stops "
                    "before any request; a job stops before a request that would take the spend its ledger "
                    "records (every run, failed ones too) plus the rest of the plan over it"
                ),
            },
        },
        module="miracl_eval.encoders.openai",
        common_defaults={"query_max_length": MAX_INPUT_TOKENS, "passage_max_length": MAX_INPUT_TOKENS},
        retrieval_settings=("view_of", "storage", "calibration_passages", "rescore"),
        throughput_settings=(
            "api_key_env",
            "allow_insecure",
            "inputs_per_request",
            "tokens_per_request",
            "concurrency",
            "tokens_per_minute",
            "requests_per_minute",
            "api_jobs",
            "patience",
            "max_retries",
            "timeout",
            "price_per_million_tokens",
            "max_usd",
        ),  # fmt: skip
        remote=True,
    ),
    "splade": Family(
        name="splade",
        methods=("sparse",),
        outputs=("sparse",),
        settings={
            "quantization": _quantization(
                51.2,
                "round",
                "weights into the impact index: round(w * 51.2), which is pyserini's round(w / 5 * 256)",
            ),
            **REVISION_SETTING,
        },
        module="miracl_eval.encoders.splade",
        retrieval_settings=("quantization",),
    ),
}


#: settings that describe a model and change none of its outputs
DESCRIPTIVE = ("trained_on",)
#: the spec key listing the settings read from the checkpoint's sentence-transformers files
#: (:mod:`miracl_eval.encoders.st_settings`): the encodings depend on the checkpoint, not on when they were read
FROM_CHECKPOINT_KEY = "from_checkpoint"
#: settings read only when encoding one role's texts (by name: ``query_*``, ``passage_*``, and the title join)
_ROLE_SETTINGS: Mapping[str, tuple[str, ...]] = {"query": ("query_",), "passage": ("passage_", "title_join")}


def encoding_settings(spec: Mapping[str, Any], role: str | None = None) -> dict[str, Any]:
    """The part of a spec that the encodings depend on: without the family's retrieval settings and,
    for one ``role`` (``query`` or ``passage``), without the other role's settings. A rule passes this
    as its params, so that a changed setting re-encodes exactly what it changes. The ``revision`` is there
    only when pinned (not the default ``main``), so that the params of a model fetched before it was a
    setting stay as they were."""
    family = get_family(spec["family"])
    other = {"query": "passage", "passage": "query", None: None}[role]
    drop = _ROLE_SETTINGS.get(other, ()) if other else ()
    read = spec.get(FROM_CHECKPOINT_KEY) or ()
    return {
        k: None if k in read else v
        for k, v in spec.items()
        if k not in family.retrieval_settings
        and k not in family.throughput_settings
        and k not in DESCRIPTIVE
        and k != FROM_CHECKPOINT_KEY
        and not (k == "revision" and pinned_revision(v) is None)
        and not any(k.startswith(p) for p in drop)
    }


def throughput_settings(spec: Mapping[str, Any]) -> dict[str, Any]:
    """The part of a resolved spec that changes how texts are encoded, not the encodings (an API's key
    variable, concurrency, retries, price): what a job reads from the config, not from its params."""
    return {k: spec[k] for k in get_family(spec["family"]).throughput_settings if k in spec}


def get_family(name: str) -> Family:
    """The registered family ``name``; raises :class:`ConfigError` (key ``family``) listing the valid ones."""
    try:
        return FAMILIES[name]
    except KeyError:
        raise ConfigError("family", f"unknown model family {name!r}; valid: {', '.join(FAMILIES)}") from None


def models_with(models: Mapping[str, Mapping[str, Any]], need: str) -> list[str]:
    """The names of ``models`` (resolved specs by name) whose family stores the output ``need`` (``dense``,
    ``sparse``) or has the method ``need`` (``multivec``), in their order."""
    return [
        name
        for name, spec in models.items()
        if need in FAMILIES[spec["family"]].outputs or need in FAMILIES[spec["family"]].methods
    ]


def searched_view(spec: Mapping[str, Any]) -> dict[str, Any]:
    """How a model's vectors are searched (the settings of :class:`miracl_eval.faiss.storage.View`): their first
    ``dimensions`` (None: all), their ``storage``, and whether they are normalised again after truncation."""
    api = FAMILIES[spec["family"]].remote
    return {
        # an API model's own dimensions are the API's (its vectors are that size); a view's truncate
        "dimensions": spec.get("dimensions") if spec.get("view_of") or not api else None,
        "storage": spec.get("storage", "float32"),
        # an API's vectors are unit length (OpenAI's): a truncated view of them is normalised again
        "normalize": True if api else bool(spec.get("normalize")),
    }
