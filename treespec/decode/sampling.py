"""Logits -> probabilities, and the random draws the engine makes.

The same `SamplingConfig` is applied to the target's logits (p) and the draft's (q); the losslessness
guarantee is relative to the processed target distribution. Temperature 0 means greedy decoding.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from treespec.errors import ConfigError


@dataclass(frozen=True)
class SamplingConfig:
    temperature: float = 0.0
    top_p: float = 1.0
    top_k: int = 0

    def __post_init__(self):
        if not self.temperature >= 0:
            raise ConfigError(f"temperature must be >= 0, got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise ConfigError(f"top_p must be in (0, 1], got {self.top_p}")
        if int(self.top_k) != self.top_k or self.top_k < 0:
            raise ConfigError(f"top_k must be an integer >= 0 (0 = off), got {self.top_k}")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0


def _numpy_rows(values: torch.Tensor) -> bool:
    """Whether `values` can be read as a numpy array without a copy or a change of dtype (CPU float32/float64)."""
    return values.device.type == "cpu" and values.dtype in (torch.float32, torch.float64)


def argmax_tokens(logits: torch.Tensor):
    """[..., V] logits -> the index of each row's first maximum, as `torch.argmax` gives it, as Python ints (nested
    lists for more than one row). CPU float32/float64 rows go through numpy, whose argmax is vectorised: over the
    default target's 49152 logits 5 us against torch's 72 us a row ([Intel(R) Xeon(R) Processor @ 2.80GHz, 2 cores;
    ISA: avx2 avx512f], 2026-12-07), paid for every node a greedy verification walks."""
    if _numpy_rows(logits):
        return logits.detach().numpy().argmax(-1).tolist()
    return logits.argmax(-1).tolist()


NUMPY_TOP_K = 8  # top_tokens takes at most this many through numpy argmax passes, more through torch.topk


def top_tokens(values: torch.Tensor, k: int) -> list[int]:
    """The indices of the k largest of [V] `values`, largest first (the first index among equal values). A CPU
    float32/float64 row and k <= NUMPY_TOP_K go through k numpy argmax passes (the later ones over a copy with the
    picks masked): over 49152 logits 19 us for k = 3 against `torch.topk`'s 111 us ([Intel(R) Xeon(R) Processor @
    2.80GHz, 2 cores; ISA: avx2 avx512f], 2026-12-07)."""
    k = min(int(k), values.shape[-1])
    if k < 1:
        return []
    if not _numpy_rows(values) or k > NUMPY_TOP_K:
        return values.topk(k).indices.tolist()
    row = values.detach().numpy()
    picked = [int(row.argmax())]
    if k > 1:
        row = row.copy()
        for _ in range(k - 1):
            row[picked[-1]] = -np.inf
            picked.append(int(row.argmax()))
    return picked


def probabilities(logits: torch.Tensor, config: SamplingConfig) -> torch.Tensor:
    """[..., V] logits -> [..., V] float32 probabilities after temperature, top-k and top-p.

    Greedy configs give a one-hot at the argmax. Top-k keeps the k largest logits; top-p keeps the
    smallest set of most likely tokens whose mass reaches top_p (always at least one).
    """
    logits = logits.float()
    if config.greedy:
        return torch.zeros_like(logits).scatter_(-1, logits.argmax(-1, keepdim=True), 1.0)
    logits = logits / config.temperature
    if config.top_k and config.top_k < logits.shape[-1]:
        kth = logits.topk(config.top_k, dim=-1).values[..., -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    probs = logits.softmax(-1)
    if config.top_p < 1:
        sorted_probs, order = probs.sort(dim=-1, descending=True)
        mass_before = sorted_probs.cumsum(-1) - sorted_probs
        sorted_probs = sorted_probs.masked_fill(mass_before >= config.top_p, 0.0)
        probs = torch.zeros_like(probs).scatter_(-1, order, sorted_probs)
        probs = probs / probs.sum(-1, keepdim=True)
    return probs


def sample(probs: torch.Tensor, generator: torch.Generator | None) -> int:
    """One token from a [V] distribution (need not be normalised), by the inverse of its float64 cumulative sum at
    one uniform draw: a token of probability 0 is never drawn. (torch.multinomial took 0.9 ms over the default
    target's 49,152 tokens on an AMD EPYC, 2026-12-05: a tenth of a sampled decoding step.)"""
    cumulative = probs.double().cumsum(-1)  # [V]
    u = torch.rand((), generator=generator, dtype=torch.float64, device=probs.device) * cumulative[-1]
    return min(int(torch.searchsorted(cumulative, u, right=True)), probs.shape[-1] - 1)


def gumbel_top_k(probs: torch.Tensor, k: int, generator: torch.Generator | None) -> torch.Tensor:
    """k distinct tokens sampled without replacement from [V] probs, in sampling order (Gumbel-top-k over the tokens
    of non-zero probability; for k = 1 that is one draw, `sample`).

    Returns fewer than k tokens when fewer than k have non-zero probability.
    """
    support = probs.nonzero().squeeze(-1)  # [S]: a drafter's reduced vocabulary or top-p cut leaves most tokens at 0
    k = min(k, support.numel())
    if k == 1:
        return torch.tensor([sample(probs, generator)], device=probs.device)
    uniform = torch.rand(support.shape, generator=generator, dtype=torch.float64, device=probs.device)
    gumbel = -torch.log(-torch.log(uniform.clamp_min(1e-300)))
    keys = torch.log(probs[support].double()) + gumbel
    return support[keys.topk(k).indices]


def sample_with_replacement(probs: torch.Tensor, k: int, generator: torch.Generator | None) -> torch.Tensor:
    """k i.i.d. tokens from [V] probs (SpecInfer's proposals; may repeat)."""
    return torch.multinomial(probs, k, replacement=True, generator=generator)


def uniform(generator: torch.Generator | None) -> float:
    """r ~ U(0, 1)."""
    device = generator.device if generator is not None else None
    return float(torch.rand((), generator=generator, dtype=torch.float64, device=device))
