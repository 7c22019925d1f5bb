"""A hub dataset's configs from its card: the card's ``configs`` in each form ``datasets`` reads, and path
patterns matched as ``datasets`` matches them (its own ``resolve_pattern`` on a local tree is the oracle)."""

from __future__ import annotations

from pathlib import Path

import pytest

from miracl_eval.errors import DownloadError
from miracl_eval.inputs import hub_card

TREE = [
    "README.md",
    "sw-corpus/dev-00000-of-00002.parquet",
    "sw-corpus/dev-00001-of-00002.parquet",
    "sw-corpus/train-00000-of-00001.parquet",
    "sw-qrels/dev-00000-of-00001.parquet",
    "data/sw/corpus-0.parquet",
    "data/sw/corpus-1.parquet",
    "data/sw/corpus-12.parquet",
    "data/yo/corpus-0.parquet",
    "data/yo/old/corpus-0.parquet",
    "deep/a/b/c.parquet",
]
PATTERNS = [
    "sw-corpus/dev-*",
    "sw-corpus/*",
    "sw-corpus/dev-?????-of-00002.parquet",
    "data/*/corpus-*.parquet",
    "data/sw/corpus-[0-1].parquet",
    "data/sw/corpus-[!0].parquet",
    "data/**/corpus-0.parquet",
    "**/*.parquet",
    "deep/**",
    "*.parquet",
    "data/yo/corpus-0.parquet",
]


@pytest.mark.parametrize("pattern", PATTERNS)
def test_patterns_match_as_datasets_resolves_them(pattern: str, tmp_path: Path) -> None:
    data_files = pytest.importorskip("datasets.data_files")
    for name in TREE:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("x")
    try:
        theirs = sorted(
            Path(p).relative_to(tmp_path).as_posix() for p in data_files.resolve_pattern(pattern, str(tmp_path))
        )
    except FileNotFoundError:
        theirs = []
    assert hub_card.matching([pattern], TREE) == theirs


def test_every_form_of_data_files_is_read() -> None:
    text = """---
license: cc-by-sa-4.0
configs:
- config_name: one
  data_files: a/*.parquet
- config_name: several
  data_files:
  - a/x.parquet
  - b/*.parquet
- config_name: split
  data_files:
  - split: dev
    path: c/dev-*
  - split: test
    path:
    - c/test-*
    - d/test-*
- data_files: e/*
---
# a card
configs: not this, it is below the header
"""
    assert hub_card.card_configs(text) == {
        "one": {"train": ["a/*.parquet"]},
        "several": {"train": ["a/x.parquet", "b/*.parquet"]},
        "split": {"dev": ["c/dev-*"], "test": ["c/test-*", "d/test-*"]},
        "default": {"train": ["e/*"]},
    }
    assert hub_card.card_configs("# no header\n") == {}
    assert hub_card.card_configs("---\nlicense: mit\n---\n") == {}


def test_the_split_is_the_one_asked_for_or_the_only_one() -> None:
    card = "---\nconfigs:\n- config_name: c\n  data_files:\n  - split: test\n    path: sw-corpus/*\n---\n"
    files = hub_card.config_files(TREE, card, "c", "dev", (".parquet",), "repo")
    assert files == ["sw-corpus/dev-00000-of-00002.parquet", "sw-corpus/dev-00001-of-00002.parquet",
                     "sw-corpus/train-00000-of-00001.parquet"]  # fmt: skip
    two = card.replace("    path: sw-corpus/*\n", "    path: sw-corpus/*\n  - split: train\n    path: x/*\n")
    with pytest.raises(DownloadError, match=r"repo/README\.md: config 'c' has no split 'dev' \(test, train\)"):
        hub_card.config_files(TREE, two, "c", "dev", (".parquet",), "repo")


@pytest.mark.parametrize(
    ("card", "message"),
    [
        ("---\nconfigs: [\n---\n", r"repo/README\.md: the card's YAML header cannot be read"),
        ("---\nconfigs: x\n---\n", r"repo/README\.md: configs must be a list, not str"),
        ("---\nconfigs:\n- config_name: c\n---\n", r"repo/README\.md: configs\[0\] needs config_name and data_files"),
        ("---\nconfigs:\n- config_name: c\n  data_files:\n  - split: dev\n---\n", r"config c: a data_files entry needs a path"),
        ("---\nconfigs:\n- config_name: c\n  data_files: nothing/*\n---\n",
         r"repo: no \.parquet file matches config 'c' split 'train' \(nothing/\*, from README\.md\)"),
    ],
)  # fmt: skip
def test_a_card_that_cannot_be_followed_says_where(card: str, message: str) -> None:
    with pytest.raises(DownloadError, match=message):
        hub_card.config_files(TREE, card, "c", "dev", (".parquet",), "repo")
