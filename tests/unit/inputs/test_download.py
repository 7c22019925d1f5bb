"""Hub downloads: the real code path, offline here; errors say how to use local files."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from miracl_eval.errors import DownloadError
from miracl_eval.inputs import download
from miracl_eval.inputs.datasets import MESSIRVE, MIRACL
from tests.helpers import SHARED


@pytest.fixture(autouse=True)
def offline(monkeypatch: pytest.MonkeyPatch) -> None:
    """Offline as a fresh process with HF_HUB_OFFLINE=1 is: huggingface_hub reads the variable once,
    at import, which an earlier test may have done (without it, each call waits for the network)."""
    import huggingface_hub.constants

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)


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

    fake_hub(monkeypatch, files, tmp_path, repo="miracl/miracl-corpus", at_revision=None)
    out = download.download_corpus(MIRACL, "sw", tmp_path / "sw")
    assert [p.name for p in out] == ["0000-docs-0.jsonl.gz", "0001-docs-1.jsonl.gz"]
    assert (tmp_path / "sw" / "0001-docs-1.jsonl.gz").read_text() == "miracl-corpus-v1.0-sw/docs-1.jsonl.gz"


MESSIRVE_FILES = [
    ".gitattributes",
    "README.md",
    "topics.messirve-v0.1-ar-test.tsv",
    "qrels.messirve-v0.1-ar-test.tsv",
    "topics.messirve-v1.0-ar-test.tsv",
    "qrels.messirve-v1.0-ar-test.tsv",
    "topics.messirve-v1.0-full-train.tsv",
    "notes/messirve-v9.9-draft.txt",  # not a topics or qrels file
]


def fake_hub(
    monkeypatch: pytest.MonkeyPatch,
    files: list[str],
    tmp_path: Path,
    repo: str = "spanish-ir/messirve-trec",
    at_revision: str | None = "main",
) -> list[str]:
    """A hub whose dataset ``repo`` lists ``files`` (at ``at_revision``, unless None); returns the
    list of files downloaded from it."""
    fetched: list[str] = []
    expected = repo

    class FakeApi:
        def list_repo_files(self, repo: str, repo_type: str, revision: str) -> list[str]:
            assert (repo, repo_type) == (expected, "dataset")
            assert at_revision is None or revision == at_revision
            return files

    def fake_download(repo: str, filename: str, revision: str, cache_dir: str | None) -> str:
        if filename not in files:
            raise FileNotFoundError(f"404 {filename}")
        fetched.append(filename)
        path = tmp_path / "cache" / filename
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(filename)
        return str(path)

    import huggingface_hub

    monkeypatch.setattr(huggingface_hub, "HfApi", FakeApi)
    monkeypatch.setattr(download, "_hub_download", fake_download)
    return fetched


def test_messirve_version_is_the_newest_in_the_file_list(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    fetched = fake_hub(monkeypatch, MESSIRVE_FILES, tmp_path)
    assert download.versions_in(MESSIRVE, MESSIRVE_FILES) == ["v0.1", "v1.0"]
    assert download.versions_in(MESSIRVE, ["topics.messirve-v1.10-ar-test.tsv", "qrels.messirve-v1.9-ar-test.tsv"]) == [
        "v1.9",
        "v1.10",
    ]  # numeric, not alphabetical
    out = tmp_path / "version.txt"
    assert download.version_stage(MESSIRVE, "latest", True, "main", out) == "v1.0"
    assert download.read_version(out) == "v1.0"
    download.download_topics_qrels(
        MESSIRVE, "ar", "test", tmp_path / "t.tsv", tmp_path / "q.tsv", version=download.read_version(out)
    )
    assert fetched == ["topics.messirve-v1.0-ar-test.tsv", "qrels.messirve-v1.0-ar-test.tsv"]
    assert (tmp_path / "t.tsv").read_text() == "topics.messirve-v1.0-ar-test.tsv"


def test_a_pinned_or_fixed_version_needs_no_file_list(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    import huggingface_hub

    class NoApi:
        def list_repo_files(self, *args: object, **kwargs: object) -> list[str]:
            raise AssertionError("the file list was read")

    monkeypatch.setattr(huggingface_hub, "HfApi", NoApi)
    assert download.resolve_version(MESSIRVE, "v0.1") == "v0.1"
    assert download.resolve_version(MIRACL, "latest") == "v1.0"  # MIRACL's file names fix it
    out = tmp_path / "version.txt"
    assert download.version_stage(MESSIRVE, "latest", False, "main", out) is None  # local files: unknown
    assert out.read_text() == "unknown\n" and download.read_version(out) is None


def test_no_versioned_files_or_no_network_fail_in_one_sentence(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    with pytest.raises(DownloadError) as offline:
        download.resolve_version(MESSIRVE, "latest")
    message = str(offline.value)
    assert message.startswith("Could not download the file list (to find the newest release; or pin one with")
    assert "hub.messirve_version" in message and "spanish-ir/messirve-trec" in message and "\n" not in message
    fake_hub(monkeypatch, ["README.md"], tmp_path)
    with pytest.raises(DownloadError, match="has no versioned topics or qrels files at revision main"):
        download.resolve_version(MESSIRVE, "latest")


SHARED_DEV = SHARED / "data" / "miracl-v1.0-dev"


def test_gated_hub_errors_say_how_to_log_in_and_accept_the_terms(tmp_path: Path) -> None:
    with pytest.raises(DownloadError) as err:
        download.download_topics_qrels(MIRACL, "sw", "dev", tmp_path / "t.tsv", tmp_path / "q.tsv")
    message = str(err.value)
    assert "set HF_TOKEN, or run `hf auth login`" in message and "accept its terms on" in message
    assert "https://huggingface.co/datasets/miracl/miracl" in message
    assert "source.corpus, source.topics and source.qrels" in message and "\n" not in message


@pytest.mark.skipif(not SHARED_DEV.is_dir(), reason="../shared (real MIRACL dev topics and qrels) is absent")
def test_topics_and_qrels_from_ir_datasets_cache_checked_by_its_md5(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """ir_datasets' cache layout (``IR_DATASETS_HOME/miracl/v1.0/{lang}/{split}/``) with the real files: they
    are copied as they are after the md5 check; a changed file fails the check and nothing is written."""
    home = tmp_path / "irds"
    cached = home / "miracl" / "v1.0" / "sw" / "dev"
    cached.mkdir(parents=True)
    shutil.copyfile(SHARED_DEV / "topics" / "topics.miracl-v1.0-sw-dev.tsv", cached / "topics.tsv")
    shutil.copyfile(SHARED_DEV / "qrels" / "qrels.miracl-v1.0-sw-dev.tsv", cached / "qrels.tsv")
    out = tmp_path / "out"
    # ir_datasets reads its home when imported: a fresh process, offline (no network to fall back on)
    script = (
        "import sys; from miracl_eval.inputs import download; from miracl_eval.inputs.datasets import MIRACL\n"
        "try:\n"
        "    print(download.topics_qrels_stage(MIRACL, 'sw', 'dev', sys.argv[1], sys.argv[2], topics_from='ir_datasets'))\n"
        "except Exception as err:\n"
        "    print(err); sys.exit(1)\n"
    )

    def stage(topics: Path, qrels: Path) -> subprocess.CompletedProcess[str]:
        env = {**os.environ, "IR_DATASETS_HOME": str(home), "HF_HUB_OFFLINE": "1"}
        return subprocess.run([sys.executable, "-c", script, str(topics), str(qrels)], capture_output=True,
                              text=True, env=env, cwd=Path(__file__).resolve().parents[3], check=False)  # fmt: skip

    done = stage(out / "t.tsv", out / "q.tsv")
    assert done.returncode == 0 and done.stdout.strip() == "miracl/sw/dev", done.stdout + done.stderr
    assert (out / "t.tsv").read_bytes() == (SHARED_DEV / "topics" / "topics.miracl-v1.0-sw-dev.tsv").read_bytes()
    assert (out / "q.tsv").read_bytes() == (SHARED_DEV / "qrels" / "qrels.miracl-v1.0-sw-dev.tsv").read_bytes()
    assert len((out / "t.tsv").read_text().splitlines()) == 482  # MIRACL sw dev
    (cached / "qrels.tsv").write_text("1 Q0 x 1\n")
    bad = stage(out / "t2.tsv", out / "q2.tsv")
    assert bad.returncode == 1 and "qrels.tsv: the qrels of miracl/sw/dev fail ir_datasets' checksum" in bad.stdout
    assert not (out / "q2.tsv").exists()
    with pytest.raises(DownloadError, match="ir_datasets has no messirve topics"):
        download.ir_datasets_topics_qrels(MESSIRVE, "ar", "test", out / "t3.tsv", out / "q3.tsv")


def _hub_cache(monkeypatch: pytest.MonkeyPatch, files: dict[str, str], tmp_path: Path, commits: list[str]) -> None:
    """A hub whose files are served from huggingface_hub's own cache layout (its functions place them:
    ``{cache}/datasets--{org}--{name}/snapshots/{commit}/{file}``), each download at the next of ``commits``."""
    from huggingface_hub import file_download

    class FakeApi:
        def list_repo_files(self, repo: str, repo_type: str, revision: str) -> list[str]:
            return list(files)

    served = iter(commits)

    def fake_download(repo: str, filename: str, revision: str, cache_dir: str | None) -> str:
        storage = tmp_path / "cache" / file_download.repo_folder_name(repo_id=repo, repo_type="dataset")
        path = Path(file_download._get_pointer_path(str(storage), next(served), filename))
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(files[filename])
        return str(path)

    import huggingface_hub

    monkeypatch.setattr(huggingface_hub, "HfApi", FakeApi)
    monkeypatch.setattr(download, "_hub_download", fake_download)


def test_a_download_records_the_commit_its_files_came_from(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """What MTEB calls a dataset's revision: the commit the hub served the files from, recorded beside them (the
    corpus folder's readers skip the record); files of two commits (a branch moved mid-download) record none."""
    from miracl_eval.inputs.preprocess import corpus_inputs

    commit, other = "a" * 40, "b" * 40
    files = {"miracl-corpus-v1.0-sw/docs-0.jsonl.gz": "0", "miracl-corpus-v1.0-sw/docs-1.jsonl.gz": "1"}
    _hub_cache(monkeypatch, files, tmp_path, [commit, commit])
    download.download_corpus(MIRACL, "sw", tmp_path / "sw")
    assert download.read_source(tmp_path / "sw") == {
        "repo": "miracl/miracl-corpus", "revision": "main", "commit": commit, "files": sorted(files),
    }  # fmt: skip
    assert [p.name for p in corpus_inputs(tmp_path / "sw")] == ["0000-docs-0.jsonl.gz", "0001-docs-1.jsonl.gz"]
    topics = {
        "miracl-v1.0-sw/topics/topics.miracl-v1.0-sw-dev.tsv": "1\tq\n",
        "miracl-v1.0-sw/qrels/qrels.miracl-v1.0-sw-dev.tsv": "1 Q0 d 1\n",
    }
    _hub_cache(monkeypatch, topics, tmp_path, [commit, other])
    out = tmp_path / "topics" / "sw"
    download.topics_qrels_stage(MIRACL, "sw", "dev", out / "topics.tsv", out / "qrels.tsv")
    record = download.read_source(out)
    assert record is not None and record["repo"] == "miracl/miracl" and record["commit"] is None
    assert record["commits"] == [commit, other]
    assert download.read_source(tmp_path) is None  # no download here: nothing known
    # a revision that is a commit names it, whatever the cache's layout
    assert download.snapshot_commit(tmp_path / "elsewhere" / "file.tsv", commit) == commit
    assert download.snapshot_commit(tmp_path / "elsewhere" / "file.tsv", "main") is None
