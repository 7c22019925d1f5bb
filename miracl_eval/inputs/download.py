"""Downloads from the Hugging Face hub (corpus shards, topics, qrels), atomically; MIRACL's topics and
qrels can also come from ir_datasets (``hub.topics_from: ir_datasets``).

Offline, when the hub cannot be reached, or when a dataset is gated (MIRACL's topics and qrels
repository asks for a login and its terms accepted), a download fails with one sentence that says
how to log in and accept the terms, and how to point the config at local files instead.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
from collections.abc import Iterable, Sequence
from pathlib import Path

from miracl_eval.atomic import atomic_output, write_text_atomic
from miracl_eval.errors import DownloadError, InputError
from miracl_eval.inputs import hub_card
from miracl_eval.inputs.datasets import Dataset
from miracl_eval.inputs.loading import iter_qrels, iter_topics

OFFLINE_HINT = (
    "to run without the hub, set source.corpus, source.topics and source.qrels in the config "
    "to local files ('{lang}' in a path is replaced by each language or partition)"
)


def login_hint(repo: str) -> str:
    """How to reach a gated hub dataset: log in and accept its terms."""
    return (
        "if the dataset is gated, log in (set HF_TOKEN, or run `hf auth login`) and accept its terms on "
        f"https://huggingface.co/datasets/{repo}"
    )


def _fail(what: str, repo: str, err: BaseException) -> DownloadError:
    reason = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
    return DownloadError(
        f"Could not download {what} from the Hugging Face hub dataset '{repo}' ({type(err).__name__}: "
        f"{reason[:200]}); {login_hint(repo)}; or, {OFFLINE_HINT}."
    )


#: the record a download leaves beside what it downloaded (:func:`read_source`): the hub repository, the revision
#: asked for, the commit the files came from (what MTEB calls a dataset's revision), the files; or the
#: ir_datasets id. A dotfile: the readers of a corpus folder skip it
SOURCE_RECORD = ".miracl-eval-source.json"
_COMMIT = re.compile(r"^[0-9a-f]{40}$")


def snapshot_commit(local: str | os.PathLike[str], revision: str) -> str | None:
    """The commit a hub file was downloaded at: the snapshot folder huggingface_hub's cache keeps it in
    (``.../snapshots/{commit}/{file}``), else ``revision`` when it is a commit; None when neither says."""
    parts = Path(local).parts
    for i in range(len(parts) - 1):
        if parts[i] == "snapshots" and _COMMIT.match(parts[i + 1]):
            return parts[i + 1]
    return revision if _COMMIT.match(revision) else None


def _write_source(folder: Path, repo: str, revision: str, commits: Iterable[str | None], files: list[str]) -> None:
    """The download's :data:`SOURCE_RECORD` in ``folder``: one commit when every file came from the same."""
    found = set(commits)
    commit = next(iter(found)) if len(found) == 1 else None
    record = {"repo": repo, "revision": revision, "commit": commit, "files": files}
    if len(found) > 1:  # the revision moved during the download (a branch), or the cache could not tell
        record["commits"] = sorted(str(c) for c in found)
    write_text_atomic(folder / SOURCE_RECORD, json.dumps(record, indent=1) + "\n")


def read_source(folder: str | os.PathLike[str]) -> dict[str, object] | None:
    """What a download's :data:`SOURCE_RECORD` in ``folder`` says; None without one (local files, or a download
    made before the record was written)."""
    try:
        record = json.loads((Path(folder) / SOURCE_RECORD).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) else None


def _hub_download(repo: str, filename: str, revision: str, cache_dir: str | None) -> str:
    from huggingface_hub import hf_hub_download

    return hf_hub_download(repo, filename, repo_type="dataset", revision=revision, cache_dir=cache_dir)


def _fetch(repo: str, filename: str, revision: str, cache_dir: str | None) -> str:
    """:func:`_hub_download`, its failure said in one sentence (:func:`_fail`)."""
    try:
        return _hub_download(repo, filename, revision, cache_dir)
    except Exception as err:  # noqa: BLE001 - huggingface_hub raises many types when offline
        raise _fail(f"'{filename}'", repo, err) from err


def repo_files(repo: str, revision: str, listing: str) -> list[str]:
    """Every path of a hub dataset repository at ``revision`` (``listing``: what a failure calls the list)."""
    from huggingface_hub import HfApi

    try:
        return list(HfApi().list_repo_files(repo, repo_type="dataset", revision=revision))
    except Exception as err:  # noqa: BLE001 - huggingface_hub raises many types when offline
        raise _fail(listing, repo, err) from err


def listed_files(repo: str, prefix: str, suffix: tuple[str, ...], revision: str, what: str) -> list[str]:
    """The hub paths of a dataset repository's files under ``prefix`` ending with one of ``suffix``, sorted."""
    files = repo_files(repo, revision, f"the file list of {what}")
    chosen = sorted(f for f in files if f.startswith(prefix) and f.endswith(suffix))
    if not chosen:
        raise DownloadError(
            f"the hub dataset '{repo}' has no files under '{prefix}' at revision {revision}; {login_hint(repo)}; "
            f"or, {OFFLINE_HINT}."
        )
    return chosen


def config_files(
    repo: str, configs: Sequence[str], split: str, revision: str, cache_dir: str | None, what: str
) -> list[list[str]]:
    """The Parquet files of each of an MTEB dataset's ``configs`` for ``split``, found as the ``datasets``
    library finds them: by the ``configs`` of the repository's card (listed and read once)."""
    files = repo_files(repo, revision, f"the file list of {what}")
    card = None
    if hub_card.CARD in files:
        card = Path(_fetch(repo, hub_card.CARD, revision, cache_dir)).read_text(encoding="utf-8")
    where = f"the hub dataset '{repo}' at revision {revision}"
    return [hub_card.config_files(files, card, config, split, (".parquet",), where) for config in configs]


def corpus_files(dataset: Dataset, corpus: str, revision: str = "main", cache_dir: str | None = None) -> list[str]:
    """The hub paths of a corpus's files (MIRACL: ``miracl-corpus-v1.0-{lang}/docs-*.jsonl.gz``; an MTEB
    dataset: its ``{lang}-corpus`` config's files of the dataset's split)."""
    hub = dataset.hub
    if hub.configs is not None:
        config = hub.configs.corpus.format(part=corpus)
        what = f"the {corpus} corpus"
        return config_files(hub.corpus_repo, [config], dataset.default_split, revision, cache_dir, what)[0]
    prefix = hub.corpus_prefix.format(part=corpus)
    return listed_files(hub.corpus_repo, prefix, hub.corpus_suffix, revision, f"the {corpus} corpus")


def download_corpus(
    dataset: Dataset,
    corpus: str,
    output_dir: str | os.PathLike[str],
    revision: str = "main",
    cache_dir: str | None = None,
) -> list[Path]:
    """Download every file of a corpus into ``output_dir`` (created atomically), with the download's
    :data:`SOURCE_RECORD` (the commit the files came from)."""
    names = corpus_files(dataset, corpus, revision, cache_dir)
    out: list[Path] = []
    commits = []
    with atomic_output(output_dir, directory=True) as tmp:
        for i, name in enumerate(names):
            local = _fetch(dataset.hub.corpus_repo, name, revision, cache_dir)
            commits.append(snapshot_commit(local, revision))
            target = tmp / f"{i:04d}-{Path(name).name}"
            shutil.copyfile(local, target)
            out.append(Path(output_dir) / target.name)
        _write_source(Path(tmp), dataset.hub.corpus_repo, revision, commits, names)
    return out


# --------------------------------------------------------------------------- versions

#: the setting that takes the newest release in the hub repository's file list
LATEST = "latest"
#: what the version file holds when the version of local topics and qrels is not known
UNKNOWN_VERSION = "unknown"
VERSION_SETTING = "hub.messirve_version"


def _version_key(version: str) -> tuple[int, ...]:
    return tuple(int(n) for n in re.findall(r"[0-9]+", version))


def versions_in(dataset: Dataset, files: Iterable[str]) -> list[str]:
    """The releases of topics and qrels among a hub repository's file names, oldest first."""
    if dataset.hub.version_pattern is None:
        return []
    pattern = re.compile(dataset.hub.version_pattern)
    found = {m.group("version") for f in files if (m := pattern.search(f))}
    return sorted(found, key=_version_key)


def resolve_version(
    dataset: Dataset, setting: str = LATEST, from_hub: bool = True, revision: str = "main"
) -> str | None:
    """The release of the topics and qrels a run uses: the dataset's fixed one (MIRACL v1.0), the
    pinned ``setting`` (MessIRve's default: the paper's v1.0), or with ``latest`` the newest present
    in the hub repository's file list (None for local files: unknown)."""
    if dataset.version is not None:
        return dataset.version
    if setting != LATEST:
        return setting
    if not from_hub:
        return None
    repo = dataset.hub.topics_repo
    listing = f"the file list (to find the newest release; or pin one with {VERSION_SETTING})"
    versions = versions_in(dataset, repo_files(repo, revision, listing))
    if not versions:
        raise DownloadError(
            f"the hub dataset '{repo}' has no versioned topics or qrels files at revision {revision}; "
            f"{login_hint(repo)}; or, {OFFLINE_HINT}."
        )
    return versions[-1]


def version_stage(
    dataset: Dataset, setting: str, from_hub: bool, revision: str, output: str | os.PathLike[str]
) -> str | None:
    """Stage entry point: write the release (:func:`resolve_version`) to ``output``, one line."""
    version = resolve_version(dataset, setting, from_hub, revision)
    write_text_atomic(output, f"{version or UNKNOWN_VERSION}\n")
    return version


def read_version(path: str | os.PathLike[str]) -> str | None:
    """The release written by :func:`version_stage` (None when unknown)."""
    text = Path(path).read_text(encoding="utf-8").strip()
    return None if text == UNKNOWN_VERSION else text


def download_topics_qrels(
    dataset: Dataset,
    partition: str,
    split: str,
    topics_out: str | os.PathLike[str],
    qrels_out: str | os.PathLike[str],
    revision: str = "main",
    cache_dir: str | None = None,
    version: str | None = None,
) -> None:
    """Download one partition's topics and qrels files of one release (default: the dataset's fixed one), with the
    download's :data:`SOURCE_RECORD` beside the topics."""
    hub = dataset.hub
    if hub.configs is not None:
        _download_parquet_topics_qrels(dataset, partition, split, topics_out, qrels_out, revision, cache_dir)
        return
    release = version or dataset.version
    if release is None:
        raise DownloadError(f"{dataset.name}: no release of the topics and qrels was chosen ({VERSION_SETTING})")
    names, commits = [], []
    for template, out in ((hub.topics_file, topics_out), (hub.qrels_file, qrels_out)):
        name = template.format(part=partition, split=split, version=release)
        local = _fetch(hub.topics_repo, name, revision, cache_dir)
        names.append(name)
        commits.append(snapshot_commit(local, revision))
        with atomic_output(out) as tmp:
            shutil.copyfile(local, tmp)
    _write_source(Path(topics_out).parent, hub.topics_repo, revision, commits, names)


def _download_parquet_topics_qrels(
    dataset: Dataset,
    partition: str,
    split: str,
    topics_out: str | os.PathLike[str],
    qrels_out: str | os.PathLike[str],
    revision: str,
    cache_dir: str | None,
) -> None:
    """An MTEB dataset's queries (``id`` or ``_id``, ``text``) and qrels (``query-id``, ``corpus-id``,
    ``score``), Parquet shards of its ``{part}-queries`` and ``{part}-qrels`` configs (:func:`config_files`),
    written as the topics TSV and TREC qrels every dataset's preprocessing reads. Every shard is checked as
    a local MTEB file is (:func:`miracl_eval.inputs.loading.iter_topics`, ``iter_qrels``: InputError names
    the shard and the record), the shards together too (an id in two), before either file is written."""
    hub = dataset.hub
    assert hub.configs is not None
    configs = [template.format(part=partition) for template in (hub.configs.queries, hub.configs.qrels)]
    found = config_files(hub.topics_repo, configs, split, revision, cache_dir, f"the {partition} queries and qrels")
    (query_files, qrels_files) = ([_fetch(hub.topics_repo, n, revision, cache_dir) for n in named] for named in found)
    commits = [snapshot_commit(local, revision) for local in [*query_files, *qrels_files]]
    lines: list[str] = []
    seen: dict[str, str] = {}
    for local in query_files:
        for n, qid, text in iter_topics(local):
            if any(c in text for c in "\t\n\r"):
                raise InputError(
                    local, f"record {n}: query {qid!r} holds a tab or a line break (the topics file's separators)"
                )
            if qid in seen:
                raise InputError(local, f"record {n}: query id {qid} repeats {seen[qid]}")
            seen[qid] = f"{local}, record {n}"
            lines.append(f"{qid}\t{text}\n")
    judged: list[str] = []
    pairs: dict[tuple[str, str], str] = {}
    for local in qrels_files:
        for n, qid, docid, relevance in iter_qrels(local):
            if (qid, docid) in pairs:
                raise InputError(local, f"record {n}: ({qid}, {docid}) is judged twice (first in {pairs[qid, docid]})")
            pairs[qid, docid] = f"{local}, record {n}"
            judged.append(f"{qid}\tQ0\t{docid}\t{relevance}\n")
    write_text_atomic(topics_out, "".join(lines))
    write_text_atomic(qrels_out, "".join(judged))
    _write_source(Path(topics_out).parent, hub.topics_repo, revision, commits, [n for named in found for n in named])


# --------------------------------------------------------------------------- ir_datasets

#: setting ``hub.topics_from``: where downloaded topics and qrels come from
TOPICS_FROM = ("hub", "ir_datasets")


def _md5(path: Path) -> str:
    digest = hashlib.md5()  # noqa: S324 - ir_datasets' checksums are md5
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def ir_datasets_id(dataset: Dataset, partition: str, split: str) -> str:
    """The ir_datasets id of a partition's topics and qrels (``miracl/sw/dev``); MIRACL only."""
    if dataset.name != "miracl":
        raise DownloadError(f"hub.topics_from: ir_datasets has no {dataset.name} topics; use hub or local files")
    return f"miracl/{partition}/{split}"


def ir_datasets_topics_qrels(
    dataset: Dataset, partition: str, split: str, topics_out: str | os.PathLike[str], qrels_out: str | os.PathLike[str]
) -> str:
    """Copy a partition's topics and qrels files as ir_datasets holds them (downloaded into its home,
    ``IR_DATASETS_HOME``, from its mirror that needs no login, if they are not there yet), after checking
    them against ir_datasets' md5 checksums; returns the ir_datasets id."""
    import ir_datasets

    name = ir_datasets_id(dataset, partition, split)
    try:
        ds = ir_datasets.load(name)
    except KeyError:
        raise DownloadError(f"ir_datasets has no dataset {name!r} (hub.topics_from: ir_datasets)") from None
    handlers = (
        ("topics", ds.queries_handler(), "_dlc", topics_out),
        ("qrels", ds.qrels_handler(), "_qrels_dlc", qrels_out),
    )
    for what, handler, attr, out in handlers:
        dlc = getattr(handler, attr)
        try:
            local = Path(dlc.path())
        except Exception as err:  # noqa: BLE001 - ir_datasets raises many types when offline
            reason = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
            raise DownloadError(
                f"Could not get the {what} of {name} from ir_datasets ({type(err).__name__}: {reason[:200]}); "
                f"put its files in ir_datasets' home ({ir_datasets.util.home_path()}), or {OFFLINE_HINT}."
            ) from err
        expected = getattr(dlc, "expected_md5", None)
        if expected and _md5(local) != expected:
            raise DownloadError(
                f"{local}: the {what} of {name} fail ir_datasets' checksum (md5 {_md5(local)}, expected {expected}); "
                "delete the file to download it again"
            )
        with atomic_output(out) as tmp:
            shutil.copyfile(local, tmp)
    return name


def topics_qrels_stage(
    dataset: Dataset,
    partition: str,
    split: str,
    topics_out: str | os.PathLike[str],
    qrels_out: str | os.PathLike[str],
    topics_from: str = "hub",
    revision: str = "main",
    cache_dir: str | None = None,
    version: str | None = None,
) -> str | None:
    """Stage entry point: a partition's topics and qrels from the hub (of ``version``) or ir_datasets."""
    if topics_from == "ir_datasets":
        name = ir_datasets_topics_qrels(dataset, partition, split, topics_out, qrels_out)
        write_text_atomic(Path(topics_out).parent / SOURCE_RECORD, json.dumps({"ir_datasets": name}) + "\n")
        return name
    download_topics_qrels(dataset, partition, split, topics_out, qrels_out, revision, cache_dir, version)
    return None
