"""Downloads from the Hugging Face hub (corpus shards, topics, qrels), atomically; MIRACL's topics and
qrels can also come from ir_datasets (``hub.topics_from: ir_datasets``).

Offline, when the hub cannot be reached, or when a dataset is gated (MIRACL's topics and qrels
repository asks for a login and its terms accepted), a download fails with one sentence that says
how to log in and accept the terms, and how to point the config at local files instead.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
from collections.abc import Iterable, Sequence
from pathlib import Path

from miracl_eval.atomic import atomic_output, write_text_atomic
from miracl_eval.errors import DownloadError
from miracl_eval.inputs import hub_card
from miracl_eval.inputs.datasets import Dataset

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
    """Download every file of a corpus into ``output_dir`` (created atomically)."""
    names = corpus_files(dataset, corpus, revision, cache_dir)
    out: list[Path] = []
    with atomic_output(output_dir, directory=True) as tmp:
        for i, name in enumerate(names):
            local = _fetch(dataset.hub.corpus_repo, name, revision, cache_dir)
            target = tmp / f"{i:04d}-{Path(name).name}"
            shutil.copyfile(local, target)
            out.append(Path(output_dir) / target.name)
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
    """Download one partition's topics and qrels files of one release (default: the dataset's fixed one)."""
    hub = dataset.hub
    if hub.configs is not None:
        _download_parquet_topics_qrels(dataset, partition, split, topics_out, qrels_out, revision, cache_dir)
        return
    release = version or dataset.version
    if release is None:
        raise DownloadError(f"{dataset.name}: no release of the topics and qrels was chosen ({VERSION_SETTING})")
    for template, out in ((hub.topics_file, topics_out), (hub.qrels_file, qrels_out)):
        name = template.format(part=partition, split=split, version=release)
        local = _fetch(hub.topics_repo, name, revision, cache_dir)
        with atomic_output(out) as tmp:
            shutil.copyfile(local, tmp)


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
    written as the topics TSV and TREC qrels every dataset's preprocessing reads."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    hub = dataset.hub
    assert hub.configs is not None
    configs = [template.format(part=partition) for template in (hub.configs.queries, hub.configs.qrels)]
    found = config_files(hub.topics_repo, configs, split, revision, cache_dir, f"the {partition} queries and qrels")
    tables = {}
    for kind, named in zip(("queries", "qrels"), found, strict=True):
        parts = []
        for name in named:
            local = _fetch(hub.topics_repo, name, revision, cache_dir)
            try:
                parts.append(pq.read_table(local))
            except Exception as err:  # noqa: BLE001 - a truncated or foreign file: said as the download's
                raise _fail(f"'{name}'", hub.topics_repo, err) from err
        tables[kind] = (named[0], pa.concat_tables(parts, promote_options="default"))
    name, queries = tables["queries"]
    key = "id" if "id" in queries.column_names else "_id"
    if key not in queries.column_names or "text" not in queries.column_names:
        raise DownloadError(
            f"{hub.topics_repo}/{name}: queries need columns id (or _id) and text, not {queries.column_names}"
        )
    lines = []
    for row, (qid, text) in enumerate(
        zip(queries.column(key).to_pylist(), queries.column("text").to_pylist(), strict=True)
    ):
        if any(c in f"{qid}{text}" for c in "\t\n\r"):
            raise DownloadError(f"{hub.topics_repo}/{name}, row {row + 1}: query {qid!r} holds a tab or a line break")
        lines.append(f"{qid}\t{text}\n")
    write_text_atomic(topics_out, "".join(lines))
    name, qrels = tables["qrels"]
    need = ("query-id", "corpus-id", "score")
    if not set(need) <= set(qrels.column_names):
        raise DownloadError(f"{hub.topics_repo}/{name}: qrels need columns {', '.join(need)}, not {qrels.column_names}")
    cols = [qrels.column(c).to_pylist() for c in need]
    write_text_atomic(qrels_out, "".join(f"{q}\tQ0\t{d}\t{int(r)}\n" for q, d, r in zip(*cols, strict=True)))


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
        return ir_datasets_topics_qrels(dataset, partition, split, topics_out, qrels_out)
    download_topics_qrels(dataset, partition, split, topics_out, qrels_out, revision, cache_dir, version)
    return None
