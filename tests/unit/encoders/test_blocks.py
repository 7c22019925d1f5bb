"""Block encoding jobs: one model load for a block's shards, shards already done skipped, and the
blocks that a later stage reads."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from miracl_eval import shards
from miracl_eval.encoders import blocks, encode
from miracl_eval.encoders.encode import encode_corpus_block, encode_corpus_shard
from miracl_eval.encoders.registry import get_family

pytestmark = pytest.mark.usefixtures("one_torch_thread")
SHARD = 20  # the fixture's 72 passages: shards 0-3 (the last of 12)


def test_names_tilings_and_covering_blocks() -> None:
    assert shards.tiling(4, 3) == ["00000-00002", "00003-00003"]
    assert shards.tiling(0, 3) == ["00000-00000"]  # an empty corpus still has its one (empty) shard
    assert shards.block_shards("00010-00019") == range(10, 20)
    with pytest.raises(ValueError, match="not a block name"):
        shards.block_shards("00019-00010")
    assert shards.shards_per_block(1_000_000, 60) == 16_666 and shards.shards_per_block(10, 60) == 1
    assert shards.block_rows("00003-00003", 72, SHARD) == 12 and shards.block_rows("00000-00001", 72, SHARD) == 40
    # written blocks that tile the corpus are kept, whatever block size wrote them; the longer first
    assert shards.covering_blocks(["00000-00001", "00002-00003", "00000-00000"], 4, 1) == ["00000-00001", "00002-00003"]
    # a gap (or blocks beyond the corpus) falls back to the configured tiling
    assert shards.covering_blocks(["00000-00001"], 4, 3) == ["00000-00002", "00003-00003"]
    assert shards.covering_blocks(["00000-00009"], 4, 4) == ["00000-00003"]
    assert shards.covering_blocks(["junk", "00000-00003"], 4, 1) == ["00000-00003"]


def _spec(tiny_checkpoints, **settings) -> dict:
    fam = get_family("bge-m3")
    return fam.resolve({"checkpoint": str(tiny_checkpoints("bge-m3")), "passage_max_length": 48, **settings})


def _pattern(folder: Path) -> dict[str, str]:
    return {kind: str(folder / kind / "{shard}.parquet") for kind in ("dense", "sparse")}


def _mtimes(folder: Path) -> dict[str, int]:
    return {str(p.relative_to(folder)): p.stat().st_mtime_ns for p in sorted(folder.rglob("*.parquet"))}


def _block(corpus, folder, spec, block="00000-00003", **kw):
    return encode_corpus_block(corpus, block, SHARD, _pattern(folder), folder / f"{block}.json", spec, 8, "cpu", **kw)


def test_a_block_encodes_its_shards_as_shard_jobs_do_and_loads_its_model_once(
    tiny_checkpoints,
    corpus_parquet,
    tmp_path,
    monkeypatch,
) -> None:
    spec = _spec(tiny_checkpoints)
    loads = []
    real = encode._load_encoder
    monkeypatch.setattr(encode, "_load_encoder", lambda *a, **k: loads.append(1) or real(*a, **k))
    result = _block(corpus_parquet, tmp_path / "block", spec)
    assert loads == [1] and result["encoded_shards"] == 4 and result["passages_encoded"] == 72
    manifest = json.loads((tmp_path / "block" / "00000-00003.json").read_text())
    assert [s["rows"] for s in manifest["shards"]] == [20, 20, 20, 12] and manifest["dim"] == 32
    for shard in range(4):
        alone = {k: tmp_path / "alone" / f"{shard}-{k}.parquet" for k in ("dense", "sparse")}
        encode_corpus_shard(corpus_parquet, shard, SHARD, alone, spec, 8, "cpu")
        for kind in ("dense", "sparse"):
            got = pq.read_table(tmp_path / "block" / kind / f"{shard:05d}.parquet")
            assert got.equals(pq.read_table(alone[kind])), (shard, kind)
            assert got.schema.metadata[blocks.FINGERPRINT_KEY] == manifest["fingerprint"].encode()


def test_done_shards_are_skipped_and_settings_re_encode(
    tiny_checkpoints, corpus_parquet, tmp_path, monkeypatch
) -> None:
    folder = tmp_path / "block"
    spec = _spec(tiny_checkpoints)
    _block(corpus_parquet, folder, spec)
    before = _mtimes(folder)
    # everything done: no model is loaded, nothing is rewritten but the manifest
    monkeypatch.setattr(encode, "_load_encoder", lambda *a, **k: pytest.fail("the model was loaded"))
    result = _block(corpus_parquet, folder, spec, token_budget=64, tokenizer_workers=2)  # throughput settings
    assert result["encoded_shards"] == 0 and _mtimes(folder) == before and result["dim"] == 32
    # other blocks over the same shards (a new block size) encode nothing either
    for block in ("00000-00001", "00002-00003"):
        assert _block(corpus_parquet, folder, spec, block=block)["encoded_shards"] == 0
    monkeypatch.undo()
    # a lost shard file (one kind): only that shard is encoded again
    (folder / "sparse" / "00002.parquet").unlink()
    assert _block(corpus_parquet, folder, spec)["encoded_shards"] == 1
    after = _mtimes(folder)
    assert {k for k in after if after[k] != before.get(k)} == {"dense/00002.parquet", "sparse/00002.parquet"}
    # a setting that changes the encodings re-encodes every shard
    assert _block(corpus_parquet, folder, _spec(tiny_checkpoints, passage_max_length=40))["encoded_shards"] == 4
    # so does a corpus newer than the shards
    spec40 = _spec(tiny_checkpoints, passage_max_length=40)
    os.utime(corpus_parquet)
    try:
        assert _block(corpus_parquet, folder, spec40)["encoded_shards"] == 4
    finally:
        os.utime(corpus_parquet, (0, 0))  # the module's fixture: older than any shard again


def test_a_killed_block_keeps_its_finished_shards(tiny_checkpoints, corpus_parquet, tmp_path, monkeypatch) -> None:
    folder = tmp_path / "block"
    spec = _spec(tiny_checkpoints)
    real = encode._encode_shard

    def dies_at_shard_2(encoder, corpus, shard, *args, **kwargs):
        if shard == 2:
            raise KeyboardInterrupt  # as a job killed mid-shard
        return real(encoder, corpus, shard, *args, **kwargs)

    monkeypatch.setattr(encode, "_encode_shard", dies_at_shard_2)
    with pytest.raises(KeyboardInterrupt):
        _block(corpus_parquet, folder, spec)
    finished = _mtimes(folder)
    assert sorted(finished) == [
        "dense/00000.parquet",
        "dense/00001.parquet",
        "sparse/00000.parquet",
        "sparse/00001.parquet",
    ]
    assert not (folder / "00000-00003.json").exists()  # no manifest: the block is not done
    monkeypatch.undo()
    assert _block(corpus_parquet, folder, spec)["encoded_shards"] == 2
    manifest = json.loads((folder / "00000-00003.json").read_text())
    assert [s["encoded"] for s in manifest["shards"]] == [False, False, True, True]
    assert {k: v for k, v in _mtimes(folder).items() if k in finished} == finished


def test_a_block_beyond_the_corpus(tiny_checkpoints, corpus_parquet, tmp_path) -> None:
    with pytest.raises(ValueError, match="block 00003-00004 is out of range"):
        _block(corpus_parquet, tmp_path, _spec(tiny_checkpoints), block="00003-00004")


def test_the_fingerprint_holds_the_dtype_the_model_ran_in_and_one_corpus_holds_one(
    tiny_checkpoints, corpus_parquet, tmp_path
) -> None:
    """``auto`` is recorded as what it became (float32 on the CPU, bfloat16 on an H200): the same model
    in another dtype re-encodes, the same dtype spelled ``auto`` does not; shards of two dtypes read
    together are an error naming them."""
    from miracl_eval.encoders.outputs import MODEL_DTYPE_KEY, iter_sparse_batches, iter_vector_batches
    from miracl_eval.errors import InputError

    folder, spec = tmp_path / "block", _spec(tiny_checkpoints)
    assert _block(corpus_parquet, folder, spec, dtype="float32")["encoded_shards"] == 4
    result = _block(corpus_parquet, folder, spec, dtype="auto")  # float32 on the CPU: the same encodings
    assert result["encoded_shards"] == 0 and result["dtype"] == "float32"
    result = _block(corpus_parquet, folder, spec, dtype="bfloat16")
    assert result["encoded_shards"] == 4 and result["dtype"] == "bfloat16"
    assert json.loads((folder / "00000-00003.json").read_text())["dtype"] == "bfloat16"
    assert pq.read_schema(folder / "dense" / "00003.parquet").metadata[MODEL_DTYPE_KEY] == b"bfloat16"
    # a later block of the same corpus encoded elsewhere, in float32
    assert _block(corpus_parquet, folder, spec, block="00002-00003", dtype="float32")["encoded_shards"] == 2
    for kind, read in (("dense", iter_vector_batches), ("sparse", iter_sparse_batches)):
        files = [folder / kind / f"{s:05d}.parquet" for s in range(4)]
        with pytest.raises(InputError, match="float32, but .*00000.parquet in bfloat16") as err:
            list(read(files))
        assert str(files[2]) in str(err.value)
        assert len(list(read(files[:2]))) >= 1 and len(list(read(files[2:]))) >= 1  # one dtype each: fine


def _as_an_earlier_release_wrote_it(folder: Path, spec: dict, block: str, device: str | None) -> None:
    """Shards and manifest as releases before the resolved dtype was recorded wrote them with ``encoder.dtype:
    auto``: the fingerprint of the setting ``auto``, no model dtype in the files or the manifest, the device the
    model ran on in the manifest (None: no manifest, as a killed job leaves)."""
    from miracl_eval.encoders.outputs import MODEL_DTYPE_KEY

    earlier = blocks.fingerprint(spec, "auto", "float32", SHARD)
    for path in sorted(folder.glob("*/*.parquet")):
        table = pq.read_table(path)
        meta = {k: v for k, v in (table.schema.metadata or {}).items() if k != MODEL_DTYPE_KEY}
        pq.write_table(table.replace_schema_metadata({**meta, blocks.FINGERPRINT_KEY: earlier.encode()}), path)
    manifest = folder / f"{block}.json"
    data = json.loads(manifest.read_text())
    data = {k: v for k, v in data.items() if k != "dtype"} | {"fingerprint": earlier, "device": device}
    if device is None:
        manifest.unlink()
    else:
        manifest.write_text(json.dumps(data))


def test_shards_of_an_earlier_release_with_auto_are_kept_where_auto_gives_the_same_dtype(
    tiny_checkpoints, corpus_parquet, tmp_path, monkeypatch, caplog
) -> None:
    """Releases before the resolved dtype was recorded stamped ``auto`` as ``auto``: their shards are kept when the
    corpus's manifests say they were encoded on the device type the job runs on (a CPU's auto is float32
    everywhere; a GPU's the same rule of the GPU), with no model loaded and no file rewritten; else they are
    encoded again, said in one warning line before the model loads. (They were all encoded again, silently:
    GPU-days per model at full size.)"""
    import logging

    folder, spec = tmp_path / "block", _spec(tiny_checkpoints)
    _block(corpus_parquet, folder, spec)  # dtype auto, on the CPU
    _as_an_earlier_release_wrote_it(folder, spec, "00000-00003", device="cpu")
    before = _mtimes(folder)
    with monkeypatch.context() as patch, caplog.at_level(logging.INFO, logger="miracl_eval"):
        patch.setattr(encode, "_load_encoder", lambda *a, **k: pytest.fail("the model was loaded"))
        result = _block(corpus_parquet, folder, spec)
    assert result["encoded_shards"] == 0 and _mtimes(folder) == before
    manifest = json.loads((folder / "00000-00003.json").read_text())
    assert manifest["dtype"] == "float32" and manifest[blocks.KEPT_KEY]["shards"] == [0, 1, 2, 3]
    kept = [r.getMessage() for r in caplog.records if "earlier release" in r.getMessage()]
    assert len(kept) == 1 and "are kept as float32" in kept[0] and "\n" not in kept[0]
    # the block run again (or another tiling of the same shards) keeps them too: its manifest says where they were made
    with monkeypatch.context() as patch:
        patch.setattr(encode, "_load_encoder", lambda *a, **k: pytest.fail("the model was loaded"))
        assert _block(corpus_parquet, folder, spec)["encoded_shards"] == 0
        assert _block(corpus_parquet, folder, spec, block="00002-00003")["encoded_shards"] == 0
    assert _mtimes(folder) == before
    (folder / "00002-00003.json").unlink()
    # Snakemake removes a block's manifest before it runs the block's job again: the record written before any
    # job runs (the workflow's onstart) still says where the shards were made
    _as_an_earlier_release_wrote_it(folder, spec, "00000-00003", device="cpu")
    blocks.remember_earlier_devices(folder)
    (folder / "00000-00003.json").unlink()
    with monkeypatch.context() as patch:
        patch.setattr(encode, "_load_encoder", lambda *a, **k: pytest.fail("the model was loaded"))
        assert _block(corpus_parquet, folder, spec)["encoded_shards"] == 0
    (folder / blocks.EARLIER_RECORD).unlink()
    # the same shards encoded on a GPU, where auto was bfloat16 or float16: this CPU job encodes them again
    _as_an_earlier_release_wrote_it(folder, spec, "00000-00003", device="cuda:0")
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="miracl_eval"):
        assert _block(corpus_parquet, folder, spec)["encoded_shards"] == 4
    said = [r.getMessage() for r in caplog.records]
    warning = next(i for i, m in enumerate(said) if "encoded again" in m)
    loaded = next(i for i, m in enumerate(said) if m.startswith("model "))
    assert warning < loaded, said  # said before any work
    assert "4 shard(s) of block 00000-00003" in said[warning] and "on cuda, where auto may have given" in said[warning]
    assert "\n" not in said[warning]
    # a killed earlier job left shards and no manifest: no device known, encoded again with the same line
    _as_an_earlier_release_wrote_it(folder, spec, "00000-00003", device=None)
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="miracl_eval"):
        assert _block(corpus_parquet, folder, spec)["encoded_shards"] == 4
    assert any("no block manifest of the corpus records" in r.getMessage() for r in caplog.records)


def test_an_earlier_releases_gpu_shards_are_kept_on_a_gpu(tiny_checkpoints, corpus_parquet, tmp_path, monkeypatch):
    """On a GPU job (simulated: the device and the dtype auto resolves to), shards an earlier release encoded on a
    GPU with auto stand as encoded in what auto gives on this GPU, with a line that says what was assumed."""
    import torch

    folder, spec = tmp_path / "block", _spec(tiny_checkpoints)
    _block(corpus_parquet, folder, spec)
    _as_an_earlier_release_wrote_it(folder, spec, "00000-00003", device="cuda:1")
    before = _mtimes(folder)
    monkeypatch.setattr(encode.base, "resolve_device", lambda device: torch.device("cuda"))
    monkeypatch.setattr(encode.base, "resolve_dtype", lambda dtype, device: torch.bfloat16)
    monkeypatch.setattr(encode, "_load_encoder", lambda *a, **k: pytest.fail("the model was loaded"))
    result = _block(corpus_parquet, folder, spec)
    assert result["encoded_shards"] == 0 and result["dtype"] == "bfloat16" and _mtimes(folder) == before


def test_a_folders_written_blocks_and_a_vector_inputs_dimension(tmp_path: Path) -> None:
    """What the workflow reads of the encodings before a job runs: the blocks whose manifests a corpus's folder
    holds (any block size), and the dimension a search job's request counts (a manifest's, a vector file's;
    the default until it is written, or when it records none)."""
    import numpy as np

    from tests.helpers import write_vectors

    folder = tmp_path / "blocks"
    assert blocks.written_blocks(folder) == []
    blocks.write_manifest(folder / "00000-00009.json", "00000-00009", [], dim=384)
    blocks.write_manifest(folder / "00010-00010.json", "00010-00010", [])  # sparse outputs only: no dim
    (folder / "notes.txt").write_text("not a manifest")
    assert sorted(blocks.written_blocks(folder)) == ["00000-00009", "00010-00010"]
    assert blocks.encoded_dim(folder / "00000-00009.json", 1024) == 384
    assert blocks.encoded_dim(folder / "00010-00010.json", 1024) == 1024
    assert blocks.encoded_dim(folder / "00020-00029.json", 1024) == 1024  # not written yet
    vectors = write_vectors(tmp_path / "q.parquet", ["q1", "q2"], np.ones((2, 8), "float32"), key="qid")
    assert blocks.encoded_dim(vectors, 1024) == 8
    assert blocks.encoded_dim(tmp_path / "missing.parquet", 1024) == 1024
    assert blocks.encoded_dim(folder / "notes.txt", 1024) == 1024  # not a vector file


def test_the_planned_dimension_is_known_before_any_vector(tmp_path) -> None:
    """What a dry run's requests assume of a model's vectors: its dimensions, an API model's published size, a
    local checkpoint's hidden_size; else the default."""
    from miracl_eval.encoders.blocks import planned_dim

    (tmp_path / "config.json").write_text('{"hidden_size": 384}')
    assert planned_dim({"family": "openai", "checkpoint": "text-embedding-3-large"}, 1024) == 3072
    assert planned_dim({"family": "openai", "checkpoint": "text-embedding-3-large", "dimensions": 256}, 1024) == 256
    assert planned_dim({"family": "openai", "checkpoint": "a-model-of-a-local-server"}, 1024) == 1024
    assert planned_dim({"family": "dense", "checkpoint": str(tmp_path)}, 1024) == 384
    # a local model's dimensions truncate what is searched: it stores its hidden_size
    assert planned_dim({"family": "dense", "checkpoint": str(tmp_path), "dimensions": 128}, 1024) == 384
    assert planned_dim({"family": "dense", "checkpoint": "org/not-downloaded"}, 1024) == 1024
    view = {"family": "openai", "checkpoint": "text-embedding-3-large", "dimensions": 256, "view_of": "oa"}
    assert planned_dim(view, 1024) == 3072  # a view reads its model's vectors; 256 is its truncation
