"""Downloads from the Hugging Face hub (corpus shards, topics, qrels), atomically.

Offline, or when the hub cannot be reached, a download fails with one sentence that says how to
point the config at local files instead.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from .atomic import atomic_output
from .datasets import Dataset
from .errors import DownloadError

OFFLINE_HINT = (
    "to run without the hub, set source.corpus, source.topics and source.qrels in the config "
    "to local files ('{lang}' in a path is replaced by each language or partition)"
)


def _fail(what: str, repo: str, err: BaseException) -> DownloadError:
    reason = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
    return DownloadError(
        f"Could not download {what} from the Hugging Face hub dataset '{repo}' ({type(err).__name__}: "
        f"{reason[:200]}); {OFFLINE_HINT}."
    )


def _hub_download(repo: str, filename: str, revision: str, cache_dir: str | None) -> str:
    from huggingface_hub import hf_hub_download

    return hf_hub_download(repo, filename, repo_type="dataset", revision=revision, cache_dir=cache_dir)


def corpus_files(dataset: Dataset, corpus: str, revision: str = "main") -> list[str]:
    """The hub paths of a corpus's files (MIRACL: ``miracl-corpus-v1.0-{lang}/docs-*.jsonl.gz``)."""
    from huggingface_hub import HfApi

    hub = dataset.hub
    prefix = hub.corpus_prefix.format(part=corpus)
    try:
        files = HfApi().list_repo_files(hub.corpus_repo, repo_type="dataset", revision=revision)
    except Exception as err:  # noqa: BLE001 - huggingface_hub raises many types when offline
        raise _fail(f"the file list of the {corpus} corpus", hub.corpus_repo, err) from err
    chosen = sorted(f for f in files if f.startswith(prefix) and f.endswith(hub.corpus_suffix))
    if not chosen:
        raise DownloadError(f"the hub dataset '{hub.corpus_repo}' has no files under '{prefix}'; {OFFLINE_HINT}.")
    return chosen


def download_corpus(
    dataset: Dataset,
    corpus: str,
    output_dir: str | os.PathLike[str],
    revision: str = "main",
    cache_dir: str | None = None,
) -> list[Path]:
    """Download every file of a corpus into ``output_dir`` (created atomically)."""
    names = corpus_files(dataset, corpus, revision)
    out: list[Path] = []
    with atomic_output(output_dir, directory=True) as tmp:
        for i, name in enumerate(names):
            try:
                local = _hub_download(dataset.hub.corpus_repo, name, revision, cache_dir)
            except Exception as err:  # noqa: BLE001
                raise _fail(f"'{name}'", dataset.hub.corpus_repo, err) from err
            target = tmp / f"{i:04d}-{Path(name).name}"
            shutil.copyfile(local, target)
            out.append(Path(output_dir) / target.name)
    return out


def download_topics_qrels(
    dataset: Dataset,
    partition: str,
    split: str,
    topics_out: str | os.PathLike[str],
    qrels_out: str | os.PathLike[str],
    revision: str = "main",
    cache_dir: str | None = None,
) -> None:
    """Download one partition's topics and qrels files."""
    hub = dataset.hub
    for template, out in ((hub.topics_file, topics_out), (hub.qrels_file, qrels_out)):
        name = template.format(part=partition, split=split)
        try:
            local = _hub_download(hub.topics_repo, name, revision, cache_dir)
        except Exception as err:  # noqa: BLE001
            raise _fail(f"'{name}'", hub.topics_repo, err) from err
        with atomic_output(out) as tmp:
            shutil.copyfile(local, tmp)
