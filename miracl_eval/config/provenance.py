"""Where each setting of the effective configuration comes from, and the record of it.

Snakemake merges the configuration key by key: first the workflow's default file
(``configfile: "config.yaml"``, read from the working directory when it is there), then every
``--configfile`` in the order given, then ``--config``; a later source wins for each key it sets,
and every key it does not set keeps the earlier value. A ``config.yaml`` left in the working
directory therefore fills in what ``--configfile exp2.yaml`` leaves out. When two or more sources
are merged, :func:`log_config_origins` logs which source each setting comes from (a warning when
the default file changes a setting of a run given ``--configfile``), and the ``effective_config`` rule
keeps the merged, validated configuration with the results (:func:`write_effective_config`).
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from miracl_eval.atomic import write_text_atomic
from miracl_eval.config.validate import validate
from miracl_eval.errors import ConfigError

#: the origin of a setting that no source sets (the schema's default, or the dataset's)
DEFAULT = "default"
COMMAND_LINE = "--config"

Layer = tuple[str, Mapping[str, Any]]


def leaves(config: Mapping[str, Any], prefix: str = "") -> Iterator[tuple[str, Any]]:
    """``(dotted key, value)`` of every setting; a list is one value."""
    for key, value in config.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping) and value:
            yield from leaves(value, f"{name}.")
        else:
            yield name, value


def origins(layers: Sequence[Layer], config: Mapping[str, Any]) -> dict[str, str]:
    """``{dotted key: label of the last layer that sets it, or DEFAULT}`` for every setting of ``config``."""
    set_by: dict[str, str] = {}
    for label, layer in layers:
        for key, _ in leaves(layer):
            set_by[key] = label
    return {key: set_by.get(key, DEFAULT) for key, _ in leaves(config)}


def describe(layers: Sequence[Layer], config: Mapping[str, Any]) -> str | None:
    """Which source each setting comes from, one line per source; ``None`` with fewer than two sources."""
    if len(layers) < 2:
        return None
    values = dict(leaves(config))
    where = origins(layers, config)
    labels = [label for label, _ in layers]
    lines = [f"the configuration merges {', '.join(labels)} (a later one wins for each key it sets):"]
    for label in dict.fromkeys(labels):
        keys = [k for k, origin in where.items() if origin == label]
        if keys:
            lines.append(f"  from {label}: " + ", ".join(f"{k}={values[k]!r}" for k in keys))
    n_default = sum(1 for origin in where.values() if origin == DEFAULT)
    if n_default:  # every one of them is in the effective config kept with the results
        lines.append(f"  and {n_default} settings from the defaults (all in results/{{dataset}}_config.yaml)")
    return "\n".join(lines)


def _merge(layers: Sequence[Layer]) -> dict[str, Any]:
    """The layers merged as Snakemake merges them: mappings key by key, any other value replaced."""

    def update(base: dict[str, Any], new: Mapping[str, Any]) -> dict[str, Any]:
        for key, value in new.items():
            if isinstance(value, Mapping):
                below = base.get(key)
                base[key] = update(dict(below) if isinstance(below, Mapping) else {}, value)
            else:
                base[key] = value
        return base

    merged: dict[str, Any] = {}
    for _, layer in layers:
        update(merged, layer)
    return merged


def changed_by(layers: Sequence[Layer], labels: Sequence[str], config: Mapping[str, Any]) -> list[str]:
    """The settings of ``config`` that differ from what the layers other than ``labels`` give alone
    (all that those layers set, when the others alone are not a valid config)."""
    try:
        alone = dict(leaves(validate(_merge([layer for layer in layers if layer[0] not in labels]))))
    except ConfigError:
        return [key for key, origin in origins(layers, config).items() if origin in labels]
    return [key for key, value in leaves(config) if key not in alone or alone[key] != value]


def _load(path: Path) -> Mapping[str, Any]:
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except (OSError, yaml.YAMLError) as err:
        raise ConfigError("(file)", f"{path} cannot be read as YAML ({err})") from None
    return data if isinstance(data, Mapping) else {}


def snakemake_layers(workflow: Any) -> tuple[list[Layer], list[str]]:
    """The configuration sources of a Snakemake run in merge order, and the labels of those that
    are the workflow's default file merged under a ``--configfile`` (none without one)."""
    settings = workflow.config_settings
    given = [Path(p).absolute() for p in workflow.overwrite_configfiles]
    default = [] if settings.replace_workflow_config else workflow.configfiles[len(given) :]
    default = [p for p in map(Path.absolute, map(Path, default)) if p not in given]
    layers: list[Layer] = [(str(p), _load(p)) for p in default + given]
    if settings.config:
        layers.append((COMMAND_LINE, dict(settings.config)))
    return layers, [str(p) for p in default] if given else []


def log_config_origins(workflow: Any, config: Mapping[str, Any]) -> None:
    """Snakefile hook: log where each setting comes from when sources are merged (main process only),
    as a warning when the workflow's default file changes a setting of a run given ``--configfile``."""
    if not workflow.is_main_process:
        return
    from snakemake.logging import logger

    layers, unasked = snakemake_layers(workflow)
    text = describe(layers, config)
    if not text:
        return
    changed = changed_by(layers, unasked, config) if unasked else []
    if not changed:
        logger.info(text)
        return
    values = dict(leaves(config))
    logger.warning(
        f"{text}\n{', '.join(unasked)} (the workflow's default config file, read from the working directory) "
        f"changes {', '.join(f'{k}={values[k]!r}' for k in changed)} of this --configfile run"
    )


HEADER = (
    "# The effective configuration of this run: every config file and --config merged, defaults filled in\n"
    "# (miracl_eval/config/schema.yaml). `--configfile` this file to run with exactly these settings.\n"
)


def fetched_lines(fetched: Mapping[str, str | os.PathLike[str]]) -> list[str]:
    """YAML comments naming the commit each fetched hub checkpoint holds (``models.{name}.commit`` ->
    its folder, whose fetch record gives it), to keep with the configuration: a revision names a branch
    that moves, the commit does not."""
    from miracl_eval.encoders.checkpoints import FETCH_RECORD, fetch_record, fetched_commit

    if not fetched:
        return []
    lines = ["# The hub checkpoints as fetched (their folder's miracl-eval-fetch.json); `revision: <commit>` pins one:"]
    for key, folder in fetched.items():
        record = fetch_record(folder) or {}
        commit = fetched_commit(folder) or f"unknown ({folder} has no {FETCH_RECORD} naming it)"
        given = record.get("revision", "?")
        lines.append(f"# {key}: {commit}  ({record.get('repo_id', '?')} at revision {given}, {folder})")
    return lines


def write_effective_config(
    config: Mapping[str, Any],
    output: str | os.PathLike[str],
    fetched: Mapping[str, str | os.PathLike[str]] | None = None,
) -> int:
    """Stage entry point: keep the validated configuration with the results (YAML), followed by the commit
    of each fetched hub checkpoint as comments (:func:`fetched_lines`). Returns #settings."""
    text = yaml.safe_dump(_plain(config), sort_keys=False, allow_unicode=True, default_flow_style=False)
    trailer = "".join(f"{line}\n" for line in fetched_lines(fetched or {}))
    write_text_atomic(output, HEADER + text + trailer)
    return sum(1 for _ in leaves(config))


def _plain(value: Any) -> Any:
    """Plain dicts and lists for YAML (a config file read as JSON gives OrderedDicts)."""
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value
