"""Code that runs only on CUDA, exercised on the CPU with a stand-in for ``torch.cuda``: which device's
stream an event is recorded on."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from miracl_eval.encoders.base import TransformerEncoder
from miracl_eval.encoders.pipeline import Batch


class FakeStream:
    def __init__(self, device: int) -> None:
        self.device = torch.device("cuda", device)


class FakeCuda:
    """``torch.cuda``'s streams and events as the CUDA runtime has them: each device has its current
    stream, and an event recorded without a stream goes on the *current device's* (device 0 here)."""

    current_device = 0

    def __init__(self) -> None:
        self.recorded: list[FakeStream] = []
        fake = self

        class Event:
            def record(self, stream: FakeStream | None = None) -> None:
                fake.recorded.append(stream if stream is not None else fake.current_stream())

        self.Event = Event

    def current_stream(self, device: torch.device | int | None = None) -> FakeStream:
        if device is None:
            return FakeStream(self.current_device)
        return FakeStream(device.index if isinstance(device, torch.device) else int(device))


def test_the_copy_done_event_is_recorded_on_the_models_device_stream(monkeypatch: pytest.MonkeyPatch) -> None:
    """A model on ``cuda:1``, this thread's current device 0: the copies of a batch's outputs run on
    device 1's stream, and so must the event that says they are done (else :meth:`Batch.wait` returns
    while the copy is still under way and the caller reads a half-filled pinned buffer)."""
    fake = FakeCuda()
    monkeypatch.setattr(torch.cuda, "current_stream", fake.current_stream)
    monkeypatch.setattr(torch.cuda, "Event", fake.Event)
    real_empty = torch.empty
    monkeypatch.setattr(torch, "empty", lambda shape, dtype, pin_memory: real_empty(shape, dtype=dtype))
    encoder = object.__new__(TransformerEncoder)
    encoder.device = torch.device("cuda", 1)
    outputs = torch.arange(6, dtype=torch.float32).reshape(2, 3)
    batch = Batch(positions=np.arange(2), input_ids=np.zeros((2, 3), np.int64), lengths=np.array([3, 3]))
    batch.tensors = {"dense": outputs}
    encoder.start_host_copy(batch)
    assert [s.device for s in fake.recorded] == [torch.device("cuda", 1)]
    assert torch.equal(batch.tensors["dense"], outputs)
