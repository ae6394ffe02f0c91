"""Verification: walk the drafted tree from the root and decide which path the target accepts.

Modes (docs/algorithms.md, "Verification"), all lossless:
  greedy               accept the child equal to argmax p_v; bonus = argmax p_v
  without_replacement  Sequoia: children were drawn without replacement from q_v (Gumbel-top-k)
  with_replacement     SpecInfer MSS: children were drawn i.i.d. from q_v
  deterministic        children were a deterministic choice (top-k, dynamic trees): q = point mass
At node v with children s_1..s_m in rank order (R <- p_v, D <- q_v):
  accept s with probability min(1, R[s] / D[s]); on rejection R <- norm(max(R - D, 0)) and, without
  replacement, D[s] <- 0, D <- norm(D). If all are rejected the bonus token is drawn from R.
All probability arithmetic is done in float64.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from treespec.decode.sampling import argmax_tokens, sample, uniform

MODES = ("greedy", "without_replacement", "with_replacement", "deterministic")


@dataclass(frozen=True)
class VerifyResult:
    accepted: tuple[int, ...]  # node indices of the accepted path, root first
    bonus: int  # the extra token from the last accepted node


def _normalise(x: torch.Tensor) -> torch.Tensor | None:
    total = x.sum()
    return x / total if total > 0 else None


def _choose_child(
    p_v: torch.Tensor, q_v: torch.Tensor | None, kids: Sequence[int], tokens: Sequence[int], mode: str,
    generator: torch.Generator | None,
) -> tuple[int | None, torch.Tensor]:
    """Try v's children in rank order; return (accepted child or None, residual R for the bonus)."""
    residual = p_v.double()
    draft = q_v.double().clone() if mode in ("without_replacement", "with_replacement") else None
    rejected = torch.zeros_like(residual, dtype=torch.bool)
    for child in kids:
        x = tokens[child]
        r = uniform(generator)
        if mode == "deterministic":
            if r < residual[x]:
                return child, residual
            residual = residual.clone()
            residual[x] = 0
            residual = _normalise(residual)
        else:
            d_x = draft[x]
            if r * d_x < residual[x] or d_x <= 0 < residual[x]:
                return child, residual
            residual = _normalise((residual - draft).clamp_min_(0))
            if mode == "without_replacement":
                rejected[x] = True
                draft[x] = 0
                draft = _normalise(draft)
                if draft is None:  # all proposal mass rejected: propose uniformly among the rest
                    draft = _normalise((~rejected).double())
        if residual is None:  # cannot happen in exact arithmetic (a rejection implies p != q)
            raise FloatingPointError("verification residual vanished; p or q is not a distribution")
    return None, residual


def verify(
    tokens: Sequence[int],
    children: Sequence[Sequence[int]],
    target_probs: torch.Tensor,
    draft_probs: torch.Tensor | None,
    mode: str,
    generator: torch.Generator | None = None,
) -> VerifyResult:
    """Accepted path and bonus token for a tree.

    tokens [N] node tokens; children[v] v's children in rank order; target_probs [N, V] processed p
    (rows needed only along the walked path); draft_probs [N, V] processed q at expanded nodes (for the
    two sampling modes).
    """
    if mode not in MODES:
        raise ValueError(f"unknown verification mode '{mode}', expected one of {MODES}")
    node, path = 0, [0]
    while True:
        kids = children[node]
        if mode == "greedy":
            best = argmax_tokens(target_probs[node])
            nxt = next((c for c in kids if tokens[c] == best), None)
            if nxt is None:
                return VerifyResult(tuple(path), best)
        else:
            if not kids:
                return VerifyResult(tuple(path), sample(target_probs[node].double(), generator))
            q_v = draft_probs[node] if draft_probs is not None else None
            nxt, residual = _choose_child(target_probs[node], q_v, kids, tokens, mode, generator)
            if nxt is None:
                return VerifyResult(tuple(path), sample(residual, generator))
        path.append(nxt)
        node = nxt
