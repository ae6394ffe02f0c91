"""One clock for every timing in treespec: `perf_counter` that first waits for queued CUDA work, and only then
(CPU runs are never synchronised: a synchronise call there costs nothing but reads as if it did something)."""

from __future__ import annotations

import time

import torch


def synchronise(device: torch.device) -> None:
    """Wait for the work queued on `device` (CUDA only; a no-op elsewhere)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


class Clock:
    """Seconds (`perf_counter`) after the device's queued work is done."""

    def __init__(self, device: torch.device):
        self.device = device

    def __call__(self) -> float:
        synchronise(self.device)
        return time.perf_counter()
