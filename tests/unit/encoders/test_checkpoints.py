"""Hub models fetched once into a local folder: pinned to a commit, recorded, and clear errors."""

from __future__ import annotations

import importlib.util
import json
import shutil
from pathlib import Path

import pytest

from miracl_eval.encoders.checkpoints import FETCH_RECORD, fetch_checkpoint, hub_folder_name, is_hub_id
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
    assert hub_folder_name("BAAI/bge-m3") == "BAAI--bge-m3"


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
