"""Hub models fetched once into a local folder: pinned to a commit, recorded, and clear errors."""

from __future__ import annotations

import hashlib
import importlib.util
import json
import shutil
from pathlib import Path

import pytest

from miracl_eval.encoders.checkpoints import (
    FETCH_RECORD,
    fetch_checkpoint,
    fetched_commit,
    hub_folder_name,
    is_hub_id,
    stale_fetch,
)
from miracl_eval.errors import DownloadError, InputError
from tests.helpers import REPO


@pytest.fixture
def fake_hub(tmp_path, monkeypatch, tiny_checkpoints) -> Path:
    """The fake hub of tests/fake_hub, serving the tiny BGE-M3 as ``test-org/tiny-m3``."""
    folder = tmp_path / "hub"
    shutil.copytree(tiny_checkpoints("bge-m3"), folder / "test-org--tiny-m3")
    monkeypatch.setenv("MIRACL_EVAL_FAKE_HUB", str(folder))
    import huggingface_hub

    monkeypatch.setattr(huggingface_hub, "HfApi", huggingface_hub.HfApi)
    monkeypatch.setattr(huggingface_hub, "snapshot_download", huggingface_hub.snapshot_download)
    spec = importlib.util.spec_from_file_location("fake_hub_site", REPO / "tests" / "fake_hub" / "sitecustomize.py")
    assert spec and spec.loader
    spec.loader.exec_module(importlib.util.module_from_spec(spec))  # patches huggingface_hub (undone after)
    return folder


def test_hub_ids_and_folders(tmp_path) -> None:
    assert is_hub_id("BAAI/bge-m3") and is_hub_id("bert-base-uncased")
    assert not is_hub_id(str(tmp_path)) and not is_hub_id("/models/x") and not is_hub_id("a/b/c")
    assert hub_folder_name("BAAI/bge-m3") == hub_folder_name("BAAI/bge-m3", "main") == "BAAI--bge-m3"
    # a folder per revision: the default's is the one fetched before revisions were a setting
    assert hub_folder_name("BAAI/bge-m3", "v2") == "BAAI--bge-m3@v2"
    assert hub_folder_name("BAAI/bge-m3", "refs/pr/1") == "BAAI--bge-m3@refs--pr--1"


def _calls(hub: Path) -> list[list[str]]:
    return [line.split("\t") for line in (hub / "calls.log").read_text().splitlines()]


def test_fetch_at_a_revision_pins_the_commit_it_names(fake_hub, tmp_path) -> None:
    tagged = Path(shutil.copytree(fake_hub / "test-org--tiny-m3", fake_hub / "test-org--tiny-m3@v2"))
    (tagged / "marker.txt").write_text("v2")
    commit = hashlib.sha1(b"test-org/tiny-m3@v2").hexdigest()  # the fake hub's commit of the tag
    target = tmp_path / hub_folder_name("test-org/tiny-m3", "v2")
    record = fetch_checkpoint("test-org/tiny-m3", target, "v2")
    assert (record["revision"], record["commit"]) == ("v2", commit)
    assert fetched_commit(target) == commit and (target / "marker.txt").read_text() == "v2"
    # the tag is looked up once, then the commit it names is downloaded (not the tag, which may move)
    assert [(c[0], c[3]) for c in _calls(fake_hub)] == [("model_info", "v2"), ("snapshot_download", commit)]
    with pytest.raises(DownloadError, match="404"):
        fetch_checkpoint("test-org/tiny-m3", tmp_path / "nope", "v3")
    assert not (tmp_path / "nope").exists()


def test_a_commit_is_always_recorded(fake_hub, tmp_path, monkeypatch) -> None:
    """A hub answer without a commit: a 40-hex revision is its own commit; a branch is an error."""
    import huggingface_hub

    monkeypatch.setattr(
        huggingface_hub.HfApi, "model_info", lambda self, repo, revision="main": type("I", (), {"sha": None})
    )
    with pytest.raises(DownloadError, match="names no commit for revision 'main' of 'test-org/tiny-m3'"):
        fetch_checkpoint("test-org/tiny-m3", tmp_path / "main")
    sha = "0123456789abcdef0123456789abcdef01234567"
    assert fetch_checkpoint("test-org/tiny-m3", tmp_path / "pinned", sha)["commit"] == sha


def test_a_folder_fetched_without_a_commit_says_so_in_one_line(tmp_path) -> None:
    folder = tmp_path / "BAAI--bge-m3"
    folder.mkdir()
    assert fetched_commit(folder) is None
    assert stale_fetch(folder) == (
        f"{folder} has no {FETCH_RECORD}: the commit it holds is unknown (the settings page and the MTEB export "
        "say so); delete the folder to fetch it again"
    )
    (folder / FETCH_RECORD).write_text(json.dumps({"repo_id": "BAAI/bge-m3", "revision": "main", "commit": "main"}))
    assert "names no 40-hex commit in its" in str(stale_fetch(folder))
    good = {"repo_id": "BAAI/bge-m3", "revision": "main", "commit": "a" * 40, "fetched": "2026-01-01T00:00:00Z"}
    (folder / FETCH_RECORD).write_text(json.dumps(good))  # as every release wrote it: nothing to say
    assert fetched_commit(folder) == "a" * 40 and stale_fetch(folder) is None
    assert stale_fetch(tmp_path / "not-fetched-yet") is None


def test_fetch_pins_the_commit_and_records_it(fake_hub, tmp_path) -> None:
    target = tmp_path / "models" / "hub" / "test-org--tiny-m3"
    record = fetch_checkpoint("test-org/tiny-m3", target)
    assert record["commit"] == "0123456789abcdef0123456789abcdef01234567" and record["revision"] == "main"
    assert json.loads((target / FETCH_RECORD).read_text())["repo_id"] == "test-org/tiny-m3"
    assert (target / "config.json").is_file() and (target / "sparse_linear.pt").is_file()
    calls = (fake_hub / "calls.log").read_text().splitlines()
    assert [c.split("\t")[:2] for c in calls] == [
        ["model_info", "test-org/tiny-m3"],
        ["snapshot_download", "test-org/tiny-m3"],
    ]


def test_a_gated_or_unknown_model_says_how_to_log_in_and_leaves_nothing(fake_hub, tmp_path) -> None:
    target = tmp_path / "models" / "gated--model"
    with pytest.raises(DownloadError) as err:
        fetch_checkpoint("gated/model", target)
    message = str(err.value)
    for part in ("'gated/model'", "401", "HF_TOKEN", "hf auth login", "accept its terms", "`checkpoint`"):
        assert part in message, (part, message)
    assert not target.exists() and not list(target.parent.glob("*"))


def test_what_the_hub_gives_must_be_a_checkpoint(fake_hub, tmp_path) -> None:
    (fake_hub / "test-org--empty").mkdir()
    (fake_hub / "test-org--empty" / "README.md").write_text("no model here")
    with pytest.raises(InputError, match="missing config.json"):
        fetch_checkpoint("test-org/empty", tmp_path / "empty")
    assert not (tmp_path / "empty").exists()
