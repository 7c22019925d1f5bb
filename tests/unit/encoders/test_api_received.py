"""The vectors an API job received, kept beside its output: read back up to a torn or damaged record, appended
to after it, dropped once the output is published."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from miracl_eval.encoders.api_received import Received, received_path, text_digest


def test_records_are_read_back_up_to_the_first_bad_one(tmp_path: Path) -> None:
    out = tmp_path / "00003.parquet"
    rng = np.random.default_rng(0)
    first, second = rng.standard_normal((3, 8)).astype(np.float32), rng.standard_normal((2, 8)).astype(np.float32)
    digests = [text_digest("k", f"text {i}") for i in range(5)]
    kept = Received(out)
    kept.append(digests[:3], first)
    kept.append(digests[3:], second)
    kept.close()
    data = bytearray(received_path(out).read_bytes())
    data[-1] ^= 0xFF  # the second record damaged (a bit flipped): it and what follows are dropped
    received_path(out).write_bytes(bytes(data) + b"MEV1")
    again = Received(out)
    assert set(again.vectors) == set(digests[:3])
    np.testing.assert_array_equal(np.stack([again.vectors[d] for d in digests[:3]]), first)
    again.append(digests[3:], second)  # appended after the last good record
    again.close()
    third = Received(out)
    assert set(third.vectors) == set(digests)
    np.testing.assert_array_equal(third.vectors[digests[4]], second[1])
    third.discard()
    assert not received_path(out).exists()
    assert text_digest("k", "a") != text_digest("other settings", "a")
