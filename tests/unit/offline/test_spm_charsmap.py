"""SentencePiece charsmap blobs: the double-array trie finds every key's prefixes, and tokenizers runs the map."""

from __future__ import annotations

import random

import pytest

from miracl_eval.offline.spm_charsmap import double_array, lookup, precompiled_charsmap


def _random_keys(rng: random.Random, n: int) -> dict[bytes, int]:
    alphabet = [b"a", b"b", b"\xff", b"\x01", "é".encode(), "漢".encode()]
    keys: dict[bytes, int] = {}
    while len(keys) < n:
        keys[b"".join(rng.choice(alphabet) for _ in range(rng.randint(1, 5)))] = rng.randrange(1 << 31)
    return keys


def test_lookup_returns_the_values_of_every_prefix_key_shortest_first():
    rng = random.Random(0)
    keys = _random_keys(rng, 300)
    units = double_array(keys)
    assert len(units) % 256 == 0  # a lookup from any node stays inside the array
    for probe in [*keys, *(k + b"a" for k in keys), b"zz", b"\xff\xff\xff\xff\xff\xff"]:
        expected = [keys[probe[:i]] for i in range(1, len(probe) + 1) if probe[:i] in keys]
        assert lookup(units, probe) == expected, probe


def test_tokenizers_applies_the_map():
    from tokenizers import normalizers

    mapping = {"ﬁ": "fi", "Ａ": "A", "\u00a0": " ", "①": "1", "x": "", "ß": "ss"}
    norm = normalizers.Precompiled(precompiled_charsmap(mapping))
    text = "ﬁne Ａ\u00a0①x ßtraße x"
    assert norm.normalize_str(text) == "".join(mapping.get(ch, ch) for ch in text)


def test_bad_keys_are_refused():
    with pytest.raises(ValueError, match="empty or holds a NUL"):
        double_array({b"a\0": 1})
    with pytest.raises(ValueError, match="out of range"):
        double_array({b"a": 1 << 31})
