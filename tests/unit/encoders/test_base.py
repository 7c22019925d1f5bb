"""The encoders' shared machinery: device and dtype, checkpoint checks, tokenization, chunking."""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch

from miracl_eval.encoders import base
from miracl_eval.encoders.registry import get_family
from miracl_eval.errors import InputError, MiraclEvalError
from miracl_eval.jobs import devices
from tests.helpers import BATCH_TOL, REPO, copy_checkpoint, sample_passages, sample_queries

pytestmark = pytest.mark.usefixtures("one_torch_thread")
FAMILY_OF_KIND = {"bge-m3": "bge-m3", "xlm-r": "dense", "bert": "dense", "decoder": "dense", "mlm": "splade"}


def _load(kind: str, folder, **settings):
    family = get_family(FAMILY_OF_KIND[kind])
    if family.name == "dense":  # the tiny checkpoints have no sentence-transformers files to read them from
        settings = {"pooling": "mean", "normalize": True, **settings}
    return family.load(family.resolve({"checkpoint": str(folder), **settings}), device="cpu")


def test_device_and_dtype_resolution(monkeypatch):
    cpu = torch.device("cpu")
    assert base.resolve_dtype("auto", cpu) == torch.float32
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda including_emulation=True: True)
    assert base.resolve_dtype("auto", torch.device("cuda")) == torch.bfloat16  # no GPU needed to decide
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda including_emulation=True: False)
    assert base.resolve_dtype("auto", torch.device("cuda")) == torch.float16  # a GPU without native bf16
    assert base.resolve_dtype("fp16", cpu) == torch.float16
    with pytest.raises(Exception, match="unknown dtype 'int8'"):
        base.resolve_dtype("int8", cpu)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.delenv(devices.LEASE_ENV, raising=False)
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    assert base.resolve_device("auto") == cpu
    with pytest.raises(Exception, match="CUDA is not usable here"):
        base.resolve_device("cuda")
    with pytest.raises(Exception, match="unknown device 'tpu0'"):
        base.resolve_device("tpu0")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert base.resolve_device("auto") == torch.device("cuda")


@pytest.mark.parametrize(
    "env",
    [
        {devices.LEASE_ENV: "1", "CUDA_VISIBLE_DEVICES": "1"},  # leased by lease_gpus
        {"SLURM_JOB_ID": "42", "SLURM_JOB_GPUS": "3", "CUDA_VISIBLE_DEVICES": "0"},  # given by SLURM
    ],
    ids=["lease", "slurm"],
)
@pytest.mark.parametrize("device", ["auto", "cuda"])
def test_a_job_holding_a_gpu_never_falls_back_to_the_cpu(monkeypatch, env, device):
    for name in (devices.LEASE_ENV, "SLURM_JOB_ID", *devices.SLURM_GPU_ENV):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(devices, "driver_version", lambda: "470.57.02")
    monkeypatch.setattr(base, "driver_version", lambda: "470.57.02")
    with pytest.raises(MiraclEvalError) as err:
        base.resolve_device(device)
    message = str(err.value)
    held = env.get(devices.LEASE_ENV) or env["CUDA_VISIBLE_DEVICES"]
    for part in (f"encoder.device '{device}'", f"holds GPU(s) {held}", f"torch {torch.__version__}", "470.57.02",
                 "Install a torch build", "encoder.device: cpu"):  # fmt: skip
        assert part in message, (part, message)
    assert ("a CPU-only build" if torch.version.cuda is None else f"built for CUDA {torch.version.cuda}") in message
    # the page and section it points to exist and say how to choose torch's build
    page, section = re.search(r"'([^']+)': (docs/\S+\.md)", message).group(2, 1)
    text = (REPO / page).read_text(encoding="utf-8")
    assert f"## {section}\n" in text and "TORCH=" in text and "580" in text
    # without a GPU of its own, auto is the CPU on purpose, and cuda still says why it cannot run
    for name in env:
        monkeypatch.delenv(name)
    if device == "auto":
        assert base.resolve_device("auto") == torch.device("cpu")
    else:
        with pytest.raises(MiraclEvalError, match="no GPU was given to this job"):
            base.resolve_device("cuda")


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
    real = base.TransformerEncoder.pad

    def counting(self, lists):  # one call per window of texts tokenized together
        sizes.append(len(lists))
        return real(self, lists)

    monkeypatch.setattr(base, "chunk_rows", lambda batch_size: 7)
    monkeypatch.setattr(base.TransformerEncoder, "pad", counting)
    chunked = enc.encode(texts, "passage", batch_size=3)
    assert sizes == [7] * (len(texts) // 7) + ([len(texts) % 7] if len(texts) % 7 else [])
    np.testing.assert_allclose(chunked.dense, whole.dense, atol=BATCH_TOL["dense"])  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="not a single string"):
        enc.encode("one text", "query", 2)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="role"):
        enc.encode(["x"], "document", 2)  # type: ignore[arg-type]
