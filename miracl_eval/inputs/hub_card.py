"""Which files of a hub dataset repository hold a config's split, as the ``datasets`` library (and so
MTEB's loader) finds them.

A dataset written with ``push_to_hub`` declares its configs in the YAML header of its card
(``README.md``)::

    configs:
    - config_name: sw-corpus
      data_files:
      - split: dev
        path: sw-corpus/dev-*

``data_files`` is a pattern, a list of patterns (both: split ``train``) or a list of ``split``/``path``
entries whose ``path`` is a pattern or a list of them. Patterns are globs over the repository's paths
where ``*`` and ``?`` stay within one folder and ``**`` crosses folders. A split is chosen as MTEB
chooses it: the one asked for, or the config's only split. Without ``configs`` in the card, ``datasets``
knows only a ``default`` config (folders are not configs), so MTEB could not load the dataset either:
that is an error here too.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence

import yaml

from miracl_eval.errors import DownloadError

CARD = "README.md"
#: the split of ``data_files`` given without one (as ``datasets`` reads them)
DEFAULT_SPLIT = "train"


def front_matter(text: str) -> str | None:
    """The YAML header of a dataset card (between its first two ``---`` lines); None without one."""
    lines = text.splitlines()
    if not lines or lines[0].strip() != "---":
        return None
    for i, line in enumerate(lines[1:], start=1):
        if line.strip() == "---":
            return "\n".join(lines[1:i])
    return None


def _patterns(value: object, where: str) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, list) and value and all(isinstance(v, str) for v in value):
        return list(value)
    raise DownloadError(f"{where}: a data_files path must be a pattern or a list of patterns, not {value!r}")


def _splits(data_files: object, where: str) -> dict[str, list[str]]:
    if isinstance(data_files, str) or (
        isinstance(data_files, list) and data_files and all(isinstance(v, str) for v in data_files)
    ):
        return {DEFAULT_SPLIT: _patterns(data_files, where)}
    if not isinstance(data_files, list) or not data_files:
        raise DownloadError(f"{where}: data_files must be a pattern or a list, not {data_files!r}")
    splits: dict[str, list[str]] = {}
    for entry in data_files:
        if not isinstance(entry, Mapping) or "path" not in entry:
            raise DownloadError(f"{where}: a data_files entry needs a path, not {entry!r}")
        split = str(entry.get("split", DEFAULT_SPLIT))
        splits.setdefault(split, []).extend(_patterns(entry["path"], where))
    return splits


def card_configs(text: str, where: str = CARD) -> dict[str, dict[str, list[str]]]:
    """config name → split → patterns, from a dataset card's ``configs``; empty when it declares none."""
    header = front_matter(text)
    if header is None:
        return {}
    try:
        meta = yaml.safe_load(header)
    except yaml.YAMLError as err:
        raise DownloadError(f"{where}: the card's YAML header cannot be read ({err})") from err
    configs = meta.get("configs") if isinstance(meta, Mapping) else None
    if configs is None:
        return {}
    if not isinstance(configs, list):
        raise DownloadError(f"{where}: configs must be a list, not {type(configs).__name__}")
    out: dict[str, dict[str, list[str]]] = {}
    for i, config in enumerate(configs):
        if not isinstance(config, Mapping) or "data_files" not in config:
            raise DownloadError(f"{where}: configs[{i}] needs config_name and data_files")
        name = str(config.get("config_name", "default"))
        out[name] = _splits(config["data_files"], f"{where}, config {name}")
    return out


def glob_regex(pattern: str) -> re.Pattern[str]:
    """A hub path pattern as a regular expression: ``**`` any path, ``*`` and ``?`` within one folder,
    ``[...]`` a character class."""
    out, i = [], 0
    while i < len(pattern):
        c = pattern[i]
        if pattern.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
            continue
        if pattern.startswith("**", i):
            out.append(".*")
            i += 2
            continue
        if c == "*":
            out.append("[^/]*")
        elif c == "?":
            out.append("[^/]")
        elif c == "[" and (end := pattern.find("]", i + 1)) > i + 1:
            body = pattern[i + 1 : end].replace("\\", "\\\\")
            out.append("[" + ("^" + body[1:] if body[0] == "!" else body) + "]")
            i = end + 1
            continue
        else:
            out.append(re.escape(c))
        i += 1
    return re.compile("".join(out))


def matching(patterns: Sequence[str], files: Iterable[str]) -> list[str]:
    """The files (sorted) that match one of ``patterns`` (paths relative to the repository root)."""
    regexes = [glob_regex(p.lstrip("/")) for p in patterns]
    return sorted(f for f in files if any(r.fullmatch(f) for r in regexes))


def config_files(
    files: Sequence[str], card: str | None, config: str, split: str, suffix: tuple[str, ...], where: str
) -> list[str]:
    """The files of ``config``'s ``split`` among a repository's ``files``, by its card's ``configs``
    (``card``: the card's text, None without a card); only files ending with one of ``suffix``.
    ``where`` names the repository and revision in errors."""
    declared = card_configs(card, f"{where}/{CARD}") if card is not None else {}
    if not declared:
        what = f"its {CARD} declares no configs" if card is not None else f"it has no {CARD} to declare its configs"
        raise DownloadError(
            f"{where}: {what}, so the datasets library (and MTEB) cannot load its config {config!r} either"
        )
    if config not in declared:
        raise DownloadError(f"{where}/{CARD} declares no config {config!r} (it has {', '.join(sorted(declared))})")
    splits = declared[config]
    chosen = split if split in splits else next(iter(splits)) if len(splits) == 1 else None
    if chosen is None:
        raise DownloadError(f"{where}/{CARD}: config {config!r} has no split {split!r} ({', '.join(splits)})")
    found = [f for f in matching(splits[chosen], files) if f.endswith(suffix)]
    if not found:
        raise DownloadError(
            f"{where}: no {'/'.join(suffix)} file matches config {config!r} split {chosen!r} "
            f"({', '.join(splits[chosen])}, from {CARD})"
        )
    return found
