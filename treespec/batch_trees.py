"""Draft one tree per batch row in lockstep: the rules of `treespec.policies`, one draft pass per level for all rows.

`Static` policies give every row the same shape with its own tokens (a row's tree is smaller where an EOS
node is not expanded, where q has too few non-zero tokens, or where the row needs fewer levels); `Dynamic`
grows each row's own shape from its own draft scores, under the same budget and depth for every row.
Per row, every choice and every random draw (from that row's generator, in the same order) is the one
the single-prompt policy makes, so row b's tree is the one `policy.draft` would give for row b alone.
The drafter always runs its root pass, even for rows that need no draft, so that its state stays in step.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

import torch

from treespec.errors import ConfigError
from treespec.policies import DraftTree, Dynamic, Static, _assemble, _pick_children, keep_best
from treespec.sampling import SamplingConfig


def draft_trees(policy, drafter, roots: Sequence[int], sampling: SamplingConfig,
                generators: Sequence[torch.Generator | None], eos: Collection[int],
                max_levels: Sequence[int]) -> list[DraftTree]:
    """One `DraftTree` per row; drafter is a batched drafter (treespec.batch_draft) or None for one-node trees."""
    if isinstance(policy, Static):
        return _static(policy, drafter, roots, sampling, generators, eos, max_levels)
    if isinstance(policy, Dynamic):
        return _dynamic(policy, drafter, roots, sampling, eos, max_levels)
    raise ConfigError(f"batched decoding drafts Static and Dynamic trees (treespec.policies), not {type(policy).__name__}")


def _static(policy: Static, drafter, roots, sampling, generators, eos, max_levels) -> list[DraftTree]:
    shape, rows = policy.shape, len(roots)
    levels = [min(shape.levels, m) for m in max_levels]
    tokens = [[int(r)] for r in roots]
    parents: list[list[int]] = [[-1] for _ in roots]
    realised = [{0: 0} for _ in roots]  # shape node -> realised node, per row
    q_rows: list[dict[int, torch.Tensor]] = [{} for _ in roots]
    logits_of: list[dict[int, torch.Tensor]] = [{} for _ in roots]
    if drafter is not None:
        root_logits = drafter.root_logits(roots)  # [B, V]
        for b in range(rows):
            if levels[b] > 1:
                logits_of[b][0] = root_logits[b]
    for level in range(max(levels) - 1):
        grow: list[list[int]] = [[] for _ in roots]
        for b in range(rows):
            if level >= levels[b] - 1:
                continue
            born = []
            for v in shape.level_nodes[level]:
                if v not in logits_of[b]:
                    continue
                rv = realised[b][v]
                picked, q = _pick_children(logits_of[b][v], len(shape.children[v]), sampling, policy.children,
                                           generators[b])
                if q is not None:
                    q_rows[b][rv] = q
                for child, token in zip(shape.children[v], picked):
                    realised[b][child] = len(tokens[b])
                    tokens[b].append(int(token))
                    parents[b].append(rv)
                    born.append(child)
            grow[b] = [c for c in born if shape.children[c] and level + 2 < levels[b]
                       and tokens[b][realised[b][c]] not in eos]
        if any(grow):
            requests = []
            for b in range(rows):
                nodes = [realised[b][c] for c in grow[b]]
                requests.append((nodes, [tokens[b][n] for n in nodes], [parents[b][n] for n in nodes]))
            for b, logits in enumerate(drafter.node_logits(requests)):
                logits_of[b].update(zip(grow[b], logits))
    mode = policy.verify_mode(sampling)
    return [_assemble(tokens[b], parents[b], q_rows[b], mode) for b in range(rows)]


def _dynamic(policy: Dynamic, drafter, roots, sampling, eos, max_levels) -> list[DraftTree]:
    mode = "greedy" if sampling.greedy else "deterministic"
    rows = len(roots)
    depth = [1 if policy.budget == 1 else min(policy.depth, m) for m in max_levels]
    # candidates per row: (score, depth, parent candidate, token, rank); candidate 0 is the root
    cands = [[(0.0, 0, -1, int(r), 0)] for r in roots]
    forwarded = [{0: 0} for _ in roots]  # candidate -> node id given to the drafter
    frontier: list[list[int]] = [[0] if depth[b] > 1 else [] for b in range(rows)]
    frontier_logits: list[torch.Tensor | None] = [None] * rows
    if drafter is not None:
        root_logits = drafter.root_logits(roots)  # [B, V]
        frontier_logits = [root_logits[b][None] for b in range(rows)]
    for level in range(1, max(depth)):
        requests: list = [None] * rows
        for b in range(rows):
            if not frontier[b]:
                continue
            born = []
            logp = torch.log_softmax(frontier_logits[b].float(), dim=-1)
            top = logp.topk(min(policy.topk, logp.shape[-1]), dim=-1)
            for row, parent in enumerate(frontier[b]):
                for rank, (lp, token) in enumerate(zip(top.values[row].tolist(), top.indices[row].tolist())):
                    born.append(len(cands[b]))
                    cands[b].append((cands[b][parent][0] + lp, level, parent, token, rank))
            if level == depth[b] - 1:
                frontier[b] = []
                continue
            best = sorted(born, key=lambda c, b=b: -cands[b][c][0])[: policy.topk]
            frontier[b] = [c for c in best if cands[b][c][3] not in eos]
            for c in frontier[b]:
                forwarded[b][c] = len(forwarded[b])
            if frontier[b]:
                requests[b] = ([forwarded[b][c] for c in frontier[b]], [cands[b][c][3] for c in frontier[b]],
                               [forwarded[b][cands[b][c][2]] for c in frontier[b]])
        if any(r is not None for r in requests):
            for b, logits in enumerate(drafter.node_logits(requests)):
                if requests[b] is not None:
                    frontier_logits[b] = logits
    return [keep_best(cands[b], forwarded[b], policy.budget, mode) for b in range(rows)]
