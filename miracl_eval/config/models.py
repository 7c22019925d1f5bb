"""Named models: the config's ``models`` mapping resolved into full specs (presets, overrides, family defaults).

A key of ``models`` is the model's name and its cache key (every file of the model lives under it). A name
that is a shipped preset (``data/presets.yaml``) needs no settings; settings given override the preset's.
Any other name must say its ``family`` and ``checkpoint``. A resolved spec is a plain dict holding the
family, the checkpoint and every setting of the family, defaults filled in; it is what the rules pass to
the jobs in ``params`` (so that a changed setting re-runs exactly that model's jobs).
"""

from __future__ import annotations

import copy
import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import yaml

from miracl_eval.config.schema_tools import coerce_strings, first_error
from miracl_eval.encoders.checkpoints import (
    DEFAULT_REVISION,
    check_checkpoint,
    hub_folder_name,
    insecure_url,
    is_hub_id,
    leaky_url,
)
from miracl_eval.encoders.prompts import template_problem
from miracl_eval.encoders.registry import FAMILIES, FROM_CHECKPOINT_KEY, VIEW_SETTINGS
from miracl_eval.errors import ConfigError, InputError

PRESETS_FILE = Path(__file__).resolve().parent.parent / "data" / "presets.yaml"
#: a model name: a path segment that is not a method name
NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._@-]*$")
RESERVED = frozenset({"bm25"})
#: where the workflow's own rules build checkpoints (a tiny model, me5-small): an input of the model's
#: jobs, checked when loaded, not at start-up (it may not be built yet)
BUILT_CHECKPOINTS = "resources/models/"
#: where the fetch_model rule keeps hub models (``PATHS["hub_model"]``)
HUB_MODELS_DIR = f"{BUILT_CHECKPOINTS}hub"


@dataclass(frozen=True)
class Preset:
    name: str
    source: str
    settings: Mapping[str, Any]
    #: how the preset's ``trained_on`` is known
    training_source: str = ""
    #: why the workflow cannot run the model (said when the preset is used); empty: it can
    refused: str = ""


def load_presets(path: Path) -> dict[str, Preset]:
    """The presets of a shipped presets file, by name."""
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    return {
        name: Preset(
            name, entry["source"], entry["settings"], entry.get("training_source", ""), entry.get("refused", "")
        )
        for name, entry in data.items()
    }


@cache
def presets() -> dict[str, Preset]:
    """The shipped model presets, by name."""
    return load_presets(PRESETS_FILE)


def _check_name(section: str, name: str) -> None:
    if not NAME.match(name) or name in RESERVED:
        raise ConfigError(
            f"{section}.{name}", f"a {section[:-1]} name is letters, digits, '.', '_', '@' and '-' (and not 'bm25')"
        )


def preset_spec(
    section: str, name: str, given: Mapping[str, Any] | None, shipped: Mapping[str, Preset], families: Collection[str]
) -> dict[str, Any]:
    """The settings of entry ``name`` of config ``section`` (``models``, ``rerankers``): its preset's,
    overridden by those ``given``, with a known ``family``; ConfigError names ``{section}.{name}...``."""
    key = f"{section}.{name}"
    _check_name(section, name)
    if given is None:
        given = {}
    if not isinstance(given, Mapping):
        raise ConfigError(key, f"must be a mapping of settings (or {{}} for a preset), not {given!r}")
    preset = shipped.get(name)
    spec: dict[str, Any] = copy.deepcopy(dict(preset.settings)) if preset else {}
    if preset and "family" in given and given["family"] != spec["family"]:
        spec = {}  # a preset's name used for another family: the preset does not apply
    _merge(spec, given)
    if "family" not in spec:
        raise ConfigError(
            f"{key}.family",
            f"is required ('{name}' is not a preset; presets: {', '.join(shipped)}; families: {', '.join(families)})",
        )
    if spec["family"] not in families:
        raise ConfigError(f"{key}.family", f"unknown family {spec['family']!r}; valid: {', '.join(families)}")
    return spec


def resolve_model(name: str, given: Mapping[str, Any] | None) -> dict[str, Any]:
    """The full spec of model ``name`` from its config entry; ConfigError names ``models.<name>...``."""
    key = f"models.{name}"
    preset = presets().get(name)
    if preset is not None and preset.refused:
        raise ConfigError(key, preset.refused)
    spec = preset_spec("models", name, given, presets(), FAMILIES)
    family = FAMILIES[spec["family"]]
    if family.remote and "model" in spec:  # an API's model: its name at the API is the model's checkpoint
        if "checkpoint" in spec and spec["checkpoint"] != spec["model"]:
            raise ConfigError(f"{key}.model", "give the API's model name once, as `model`")
        spec["checkpoint"] = spec.pop("model")
    if family.remote and "checkpoint" not in spec:
        raise ConfigError(f"{key}.model", "is required (the model's name at the API, e.g. text-embedding-3-large)")
    schema = family.schema()
    spec = coerce_strings(spec, schema)
    template = spec.get("query_template")
    problem = template_problem(template) if isinstance(template, str) else None
    if problem:
        raise ConfigError(f"{key}.query_template", problem)
    err = first_error(spec, schema)
    if err is not None:
        raise ConfigError(f"{key}.{err[0]}" if err[0] else key, err[1])
    spec = family.resolve({k: v for k, v in spec.items() if k != "family"}, key)
    if given and "calibration_passages" in given:
        _check_calibration(spec, key)
    if family.remote:
        leak = leaky_url(spec["base_url"])
        if leak:  # not the URL itself: it may hold a secret
            raise ConfigError(f"{key}.base_url", f"the base URL {leak}")
        if insecure_url(spec["base_url"]) and not spec["allow_insecure"]:
            raise ConfigError(
                f"{key}.base_url",
                f"{spec['base_url']} is neither https:// nor a loopback address: the API key would travel in clear "
                "(set allow_insecure: true to accept it)",
            )
        if spec.get("max_usd") and not spec.get("price_per_million_tokens"):
            raise ConfigError(
                f"{key}.price_per_million_tokens",
                f"max_usd is {spec['max_usd']:g} but no price is given: the spend could not be counted against "
                "it (set the API's US dollars per 1M input tokens)",
            )
        longest = max(int(spec["passage_max_length"]), int(spec["query_max_length"]))
        if int(spec["tokens_per_request"]) < longest:
            raise ConfigError(
                f"{key}.tokens_per_request",
                f"{spec['tokens_per_request']:,} tokens a request is less than one text may take "
                f"(passage_max_length {spec['passage_max_length']:,}, query_max_length {spec['query_max_length']:,}):"
                " such a text would go alone in a request over the limit (raise it, or lower the max lengths)",
            )
        return spec
    check_revision(spec, key)
    folder = Path(spec["checkpoint"]).expanduser()
    if folder.is_dir() and not spec["checkpoint"].startswith(BUILT_CHECKPOINTS):
        try:
            check_checkpoint(folder)
        except InputError as err:
            raise ConfigError(f"{key}.checkpoint", str(err)) from None
    if spec["family"] == "dense":
        spec = _checkpoint_settings(spec, folder, key)
    return spec


def check_revision(spec: Mapping[str, Any], key: str) -> None:
    """A ``revision`` names a commit, tag or branch of a hub model: given with a local checkpoint folder
    (or one the workflow builds), it is an error naming ``{key}.revision``."""
    if spec.get("revision") is not None and not is_hub_id(spec["checkpoint"]):
        raise ConfigError(
            f"{key}.revision",
            f"names a revision of a Hugging Face hub model, and the checkpoint {spec['checkpoint']!r} is a local "
            "folder: leave it out, or give the hub id as the checkpoint",
        )


def _checkpoint_settings(spec: dict[str, Any], folder: Path, key: str) -> dict[str, Any]:
    """A dense spec's left-out settings from its checkpoint's sentence-transformers files (its module
    chain checked), when the checkpoint is a folder here (a hub model once fetched:
    ``resources/models/hub/{org}--{name}``, ``...@{revision}``); otherwise they are read when the model is loaded."""
    from miracl_eval.encoders.checkpoints import hub_folder_name
    from miracl_eval.encoders.registry import FROM_CHECKPOINT_KEY
    from miracl_eval.encoders.st_settings import fill_from_checkpoint

    local = folder if folder.is_dir() else None
    if local is None and is_hub_id(spec["checkpoint"]):
        fetched = Path(HUB_MODELS_DIR) / hub_folder_name(spec["checkpoint"], spec.get("revision"))
        local = fetched if fetched.is_dir() else None
    if local is None:
        return spec
    filled, read = fill_from_checkpoint(spec, local, key)
    if read:
        filled[FROM_CHECKPOINT_KEY] = read
    return filled


def _merge(base: dict[str, Any], over: Mapping[str, Any]) -> None:
    for k, v in over.items():
        if isinstance(v, Mapping) and isinstance(base.get(k), Mapping):
            inner = dict(base[k])
            _merge(inner, v)
            base[k] = inner
        else:
            base[k] = copy.deepcopy(v)


#: what a view of another model (``view_of``) may set: how the vectors are searched, not how they are made
VIEW_KEYS = frozenset(VIEW_SETTINGS)
#: the families whose single vectors a view can search (an API model's too: its dimensions truncate)
VIEWED_FAMILIES = ("dense", "openai")


def resolve_models(models: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """Every model's spec; a view (``view_of``) takes its model's settings and sets only :data:`VIEW_KEYS`."""
    plain = {n: g for n, g in models.items() if not (isinstance(g, Mapping) and g.get("view_of") is not None)}
    out = {name: resolve_model(name, given) for name, given in plain.items()}
    for name, given in models.items():
        if name in out:
            continue
        base = given["view_of"]
        key = f"models.{name}"
        _check_name("models", name)
        if not isinstance(base, str):
            raise ConfigError(f"{key}.view_of", f"must be the name of a model of this run, not {base!r}")
        if base not in plain:
            why = "a view itself" if base in models else "not under `models`"
            raise ConfigError(
                f"{key}.view_of", f"'{base}' is {why}: a view searches the encodings of a model of this run"
            )
        family = out[base]["family"]
        if family not in VIEWED_FAMILIES:
            raise ConfigError(
                f"{key}.view_of", f"'{base}' is a {family} model; views are of {' and '.join(VIEWED_FAMILIES)} models"
            )
        other = sorted(set(given) - VIEW_KEYS)
        if other:
            raise ConfigError(
                f"{key}.{other[0]}",
                f"a view shares the encodings of '{base}': only {', '.join(sorted(VIEW_KEYS - {'view_of'}))} may be set",
            )
        schema = FAMILIES[family].schema()
        spec = coerce_strings({**copy.deepcopy(out[base]), **given}, schema)
        err = first_error({k: v for k, v in spec.items() if k != FROM_CHECKPOINT_KEY}, schema)
        if err is not None:
            raise ConfigError(f"{key}.{err[0]}" if err[0] else key, err[1])
        if "calibration_passages" in given:
            _check_calibration(spec, key)
        asked = out[base].get("dimensions")
        if FAMILIES[family].remote and asked is not None and (spec["dimensions"] or 0) > asked:
            raise ConfigError(
                f"{key}.dimensions",
                f"{spec['dimensions']} is more than the {asked} dimensions the API returns for '{base}' "
                f"(models.{base}.dimensions): a view searches the first N of those",
            )
        out[name] = spec
    return {name: out[name] for name in models}


def _check_calibration(spec: Mapping[str, Any], key: str) -> None:
    """``calibration_passages`` given for vectors not held as int8 would calibrate nothing."""
    if spec.get("storage") != "int8":
        raise ConfigError(
            f"{key}.calibration_passages",
            f"calibrates int8 storage only, and this model's storage is {spec.get('storage')} (storage: int8 uses it)",
        )


def hub_folder(spec: Mapping[str, Any]) -> str | None:
    """The folder (under :data:`HUB_MODELS_DIR`, ``PATHS["hub_model"]``) that the ``fetch_model`` rule fetches a
    model's or reranker's hub checkpoint into, one per revision (``BAAI--bge-m3``, ``BAAI--bge-m3@v2``); None
    when its ``checkpoint`` is a folder (one the workflow builds, or a local one), which its jobs load as it is."""
    given = str(spec["checkpoint"])
    if given.startswith(BUILT_CHECKPOINTS) or not is_hub_id(given):
        return None
    return hub_folder_name(given, spec.get("revision"))


def hub_checkpoints(
    models: Mapping[str, Mapping[str, Any]], rerankers: Mapping[str, Mapping[str, Any]]
) -> dict[str, tuple[str, str]]:
    """The hub checkpoints that ``models`` (but those behind an API, whose checkpoint is the API's model
    name) and ``rerankers`` name, as ``(repository, revision)`` by the folder they are fetched into
    (:func:`hub_folder`); a revision left out is :data:`~miracl_eval.encoders.checkpoints.DEFAULT_REVISION`."""
    specs = [*(s for s in models.values() if not FAMILIES[s["family"]].remote), *rerankers.values()]
    fetched: dict[str, tuple[str, str]] = {}
    for spec in specs:
        folder = hub_folder(spec)
        if folder is not None:
            fetched[folder] = (str(spec["checkpoint"]), str(spec.get("revision") or DEFAULT_REVISION))
    return fetched
