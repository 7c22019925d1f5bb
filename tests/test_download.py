"""Hub downloads: the real code path, offline here; errors say how to use local files."""

from __future__ import annotations

from pathlib import Path

import pytest

from miracl_eval import download
from miracl_eval.datasets import MESSIRVE, MIRACL
from miracl_eval.errors import DownloadError


@pytest.fixture(autouse=True)
def offline(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


def test_offline_topics_download_fails_with_one_clear_sentence(tmp_path: Path) -> None:
    with pytest.raises(DownloadError) as err:
        download.download_topics_qrels(MIRACL, "sw", "dev", tmp_path / "t.tsv", tmp_path / "q.tsv")
    message = str(err.value)
    assert message.startswith("Could not download 'miracl-v1.0-sw/topics/topics.miracl-v1.0-sw-dev.tsv'")
    assert "set source.corpus, source.topics and source.qrels in the config" in message
    assert "\n" not in message and not (tmp_path / "t.tsv").exists()


def test_offline_corpus_listing_fails_clearly(tmp_path: Path) -> None:
    with pytest.raises(DownloadError, match="the file list of the eswiki corpus.*spanish-ir/eswiki_20240401_corpus"):
        download.download_corpus(MESSIRVE, "eswiki", tmp_path / "corpus")
    assert not (tmp_path / "corpus").exists()


def test_corpus_files_are_chosen_by_prefix_and_suffix(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    files = [
        "README.md",
        "miracl-corpus-v1.0-sw/docs-1.jsonl.gz",
        "miracl-corpus-v1.0-sw/docs-0.jsonl.gz",
        "miracl-corpus-v1.0-yo/docs-0.jsonl.gz",
    ]

    class FakeApi:
        def list_repo_files(self, repo: str, repo_type: str, revision: str) -> list[str]:
            assert (repo, repo_type) == ("miracl/miracl-corpus", "dataset")
            return files

    def fake_download(repo: str, filename: str, revision: str, cache_dir: str | None) -> str:
        path = tmp_path / "cache" / filename
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(filename)
        return str(path)

    import huggingface_hub

    monkeypatch.setattr(huggingface_hub, "HfApi", FakeApi)
    monkeypatch.setattr(download, "_hub_download", fake_download)
    out = download.download_corpus(MIRACL, "sw", tmp_path / "sw")
    assert [p.name for p in out] == ["0000-docs-0.jsonl.gz", "0001-docs-1.jsonl.gz"]
    assert (tmp_path / "sw" / "0001-docs-1.jsonl.gz").read_text() == "miracl-corpus-v1.0-sw/docs-1.jsonl.gz"
