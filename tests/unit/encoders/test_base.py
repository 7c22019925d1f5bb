"""The encoders' shared machinery: device and dtype, checkpoint checks, tokenization, chunking."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from miracl_eval.encoders import base
from miracl_eval.encoders.registry import get_family
from miracl_eval.errors import InputError
from tests.helpers import copy_checkpoint, sample_passages, sample_queries

pytestmark = pytest.mark.usefixtures("one_torch_thread")
FAMILY_OF_KIND = {"bge-m3": "bge-m3", "xlm-r": "dense", "bert": "dense", "decoder": "dense", "mlm": "splade"}


def _load(kind: str, folder, **settings):
    family = get_family(FAMILY_OF_KIND[kind])
    return family.load(family.resolve({"checkpoint": str(folder), **settings}), device="cpu")


def test_device_and_dtype_resolution(monkeypatch):
    cpu = torch.device("cpu")
    assert base.resolve_dtype("auto", cpu) == torch.float32
    assert base.resolve_dtype("auto", torch.device("cuda")) == torch.bfloat16  # no GPU needed to decide
    assert base.resolve_dtype("fp16", cpu) == torch.float16
    with pytest.raises(Exception, match="unknown dtype 'int8'"):
        base.resolve_dtype("int8", cpu)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert base.resolve_device("auto") == cpu
    with pytest.raises(Exception, match="CUDA is not available"):
        base.resolve_device("cuda")
    with pytest.raises(Exception, match="unknown device 'tpu0'"):
        base.resolve_device("tpu0")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert base.resolve_device("auto") == torch.device("cuda")


@pytest.mark.parametrize("kind", ["bge-m3", "bert", "decoder", "mlm"])
@pytest.mark.parametrize("missing", ["tokenizer.json", "model.safetensors", "config.json"])
def test_local_checkpoint_without_a_file(tiny_checkpoints, tmp_path, kind, missing):
    folder = copy_checkpoint(tiny_checkpoints(kind), tmp_path / "ckpt", {missing})
    with pytest.raises(InputError) as err:
        _load(kind, folder)
    assert err.value.path == str(folder)  # the message names the folder...
    assert err.value.reason.startswith("missing") and missing in err.value.reason  # ... and the missing file


@pytest.mark.parametrize("kind", ["bge-m3", "bert", "decoder"])
def test_tokenization_fast_path_and_fallback(tiny_checkpoints, kind, monkeypatch):
    settings = {"pooling": "last"} if kind == "decoder" else {}
    enc = _load(kind, tiny_checkpoints(kind), **settings)
    specials = " ".join(enc.tokenizer.all_special_tokens)
    texts = [*sample_queries(), *sample_passages(per_lang=2), "", f"a {specials} b", "ＡＢＣ ﬁne"]
    ids, lengths = enc.tokenize(texts, 40)
    suffix = list(enc.suffix_ids)
    assert suffix == ([2] if kind == "decoder" else [])  # the decoder's tokenizer adds <s> only: </s> is appended
    assert enc._backends[40 - len(suffix)] is True  # the backend path was checked and is in use
    want = [row + suffix for row in enc.tokenizer(texts, truncation=True, max_length=40 - len(suffix))["input_ids"]]
    assert [row[:n].tolist() for row, n in zip(ids, lengths, strict=True)] == want
    assert max(lengths) == 40
    assert all((row[n:] == enc.pad_id).all() for row, n in zip(ids, lengths, strict=True))

    monkeypatch.setattr(enc, "_backends", {})
    monkeypatch.setattr(type(enc), "_fast_backend_matches", lambda self, probe, max_length: False)
    ids2, lengths2 = enc.tokenize(texts, 40)
    assert np.array_equal(ids, ids2) and np.array_equal(lengths, lengths2)


def test_large_inputs_are_encoded_in_chunks(tiny_checkpoints, monkeypatch):
    enc = _load("bert", tiny_checkpoints("bert"), passage_max_length=32)
    texts = sample_passages(per_lang=4)
    whole = enc.encode(texts, "passage", batch_size=3)
    sizes: list[int] = []
    real = base.TransformerEncoder.tokenize

    def counting(self, chunk, max_length):
        sizes.append(len(chunk))
        return real(self, chunk, max_length)

    monkeypatch.setattr(base, "chunk_rows", lambda batch_size: 7)
    monkeypatch.setattr(base.TransformerEncoder, "tokenize", counting)
    chunked = enc.encode(texts, "passage", batch_size=3)
    assert sizes == [7] * (len(texts) // 7) + ([len(texts) % 7] if len(texts) % 7 else [])
    np.testing.assert_allclose(chunked.dense, whole.dense, atol=1e-6)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="not a single string"):
        enc.encode("one text", "query", 2)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="role"):
        enc.encode(["x"], "document", 2)  # type: ignore[arg-type]
