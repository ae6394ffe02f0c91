"""A draft's agreement with the target's greedy text by position: everywhere, and where decoding passes start.

A training run reports teacher-forced agreement averaged over every answer position; `measure_acceptance`
reports P_1 where the passes of a spine-tree decode start, right after a token the draft did not foresee or
after a fully accepted path. Those positions are harder than the average one, so at depth 1 the second figure
is the lower (deeper it is the higher: a pass reaches depth 2 only through an accepted depth 1). This module
replays a greedy spine-tree decode from teacher-forced proposals (`spine_walk`: its counts are
`measure_acceptance`'s for the same draft, prompt and length) and splits the teacher-forced agreement into the
positions where passes start and the others, so that both views come from one run.

Conventions: a sequence x_0 .. x_{L-1}; `proposals[d-1, i]` are the draft's `width` most likely tokens for
position i drafted at depth d, that is from the root x_{i-d} with the target's own tokens x_{i-d+1} ..
x_{i-1} on the path above (EAGLE heads: the training-time test's unrolled level d; plain drafts: their
forward over the sequence, the same at every depth).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields

import numpy as np
import torch
from transformers import PreTrainedModel

from treespec.models.eagle_head import EagleDraftModel, target_features
from treespec.plan.acceptance import add_step_outcome


@dataclass(frozen=True)
class SpineWalk:
    """A replayed greedy spine-tree decode. `roots`: the root position of every counted pass (the last pass of
    the generation is left out, as `measure_acceptance` leaves it out); `counts` [D, W]: passes whose accepted
    path took rank k at depth d; `observations` [D]: passes that reached depth d; `passes`: all passes."""

    roots: list[int]
    counts: np.ndarray
    observations: np.ndarray
    passes: int
    new_tokens: int


def spine_walk(proposals: torch.Tensor, tokens: torch.Tensor, root: int, new_tokens: int, max_new_tokens: int) -> SpineWalk:
    """Replay a greedy decode with `treespec.acceptance.spine_tree(W, D)` over proposals [D, L, W] (token ids)
    and the target's greedy sequence tokens [L] (prompt, then `new_tokens` generated ones, x_root the prompt's
    last token). As the engine does, a pass drafts at most `max_new_tokens - produced - 1` levels."""
    depth, _, width = proposals.shape
    if len(tokens) < root + 1 + new_tokens:
        raise ValueError(f"tokens holds {len(tokens)} ids, fewer than root {root} + 1 + {new_tokens} new tokens")
    counts = np.zeros((depth, width), dtype=np.int64)
    observations = np.zeros(depth, dtype=np.int64)
    steps: list[tuple[int, list[int], int]] = []  # (root position, accepted ranks, drafted levels) per pass
    end, r = root + new_tokens, root
    while r < end:  # r - root tokens produced so far
        ranks, levels = [], min(depth, max_new_tokens - (r - root) - 1)
        for d in range(1, levels + 1):
            i = r + d
            if i > end:  # beyond the generation's EOS: only in its last pass, which is not counted
                break
            hits = (proposals[d - 1, i] == tokens[i]).nonzero()
            if len(hits) == 0:
                break
            ranks.append(int(hits[0]))
            if ranks[-1] != 0:
                break
        steps.append((r, ranks, levels))
        r += len(ranks) + 1
    for _, ranks, levels in steps[:-1]:
        add_step_outcome(counts, observations, ranks, levels + 1)
    roots = [r for r, _, _ in steps[:-1]]
    return SpineWalk(roots, counts, observations, len(steps), new_tokens)


@torch.no_grad()
def teacher_forced_proposals(target: PreTrainedModel, draft: PreTrainedModel, tokens: torch.Tensor, depth: int,
                             width: int) -> torch.Tensor:
    """proposals [depth, L, width] (token ids; -1 where i < d) for the sequence tokens [L] (see the module's
    conventions): one target pass and `depth` unrolled levels for an EAGLE head, one draft pass otherwise."""
    from treespec.training.train import eagle_hidden

    device = next(target.parameters()).device
    tokens = tokens.to(device)
    length = len(tokens)
    out = torch.full((depth, length, width), -1, dtype=torch.long, device=device)
    if isinstance(draft, EagleDraftModel):
        layers = draft.config.feature_layers
        base = target.base_model(tokens[None], output_hidden_states=bool(layers))
        features = draft.fuse_features(target_features(target, base, layers)[:, :-1])
        dtype = next(draft.parameters()).dtype
        embeds = target.get_input_embeddings()(tokens[None, 1:]).to(dtype)
        levels = eagle_hidden(draft, features.to(dtype), embeds, torch.tensor([length - 1], device=device), depth)
        for d, hidden in enumerate(levels, start=1):  # level d at input index j drafts x_{j+2} from the root x_{j-d+2}
            top = draft.reduced_logits(hidden[0]).topk(min(width, len(draft.output_ids)), dim=-1).indices
            ids = draft.output_ids[top]  # [L-1, w]
            out[d - 1, d + 1:, : ids.shape[1]] = ids[d - 1: length - 2]
    else:
        top = draft(tokens[None]).logits[0].topk(width, dim=-1).indices  # row i-1 drafts x_i
        for d in range(1, depth + 1):
            out[d - 1, d:] = top[d - 1: length - 1]
    return out


@dataclass(frozen=True)
class PositionAgreement:
    """Counts over a set of greedy generations (hits, positions): `level` [D, 2] teacher-forced top-1 agreement at
    depth d over every generated position; `at_starts` / `elsewhere` [2] depth-1 agreement where counted passes
    start and at the other positions; `in_vocabulary` [2] generated tokens the draft can propose at all; the walk's
    rank counts [D, W] and observations [D] (its P_1 by depth is `measure_acceptance`'s)."""

    level: np.ndarray
    at_starts: np.ndarray
    elsewhere: np.ndarray
    in_vocabulary: np.ndarray
    counts: np.ndarray
    observations: np.ndarray
    passes: int
    new_tokens: int

    @staticmethod
    def empty(depth: int, width: int) -> PositionAgreement:
        z = np.zeros
        return PositionAgreement(z((depth, 2), np.int64), z(2, np.int64), z(2, np.int64), z(2, np.int64),
                                 z((depth, width), np.int64), z(depth, np.int64), 0, 0)

    def __add__(self, other: PositionAgreement) -> PositionAgreement:
        return PositionAgreement(*(getattr(self, f.name) + getattr(other, f.name) for f in fields(self)))

    def summary(self) -> dict:
        """Rates (hits / positions) and the walk's P_1 by depth, plain floats and ints for YAML."""
        rate = lambda hits, n: round(float(hits) / int(n), 4) if n else None  # noqa: E731
        obs = np.maximum(self.observations, 1)
        return {
            "agreement_by_depth": [rate(*row) for row in self.level],
            "positions_by_depth": [int(row[1]) for row in self.level],
            "agreement_at_pass_starts": rate(*self.at_starts), "pass_starts": int(self.at_starts[1]),
            "agreement_elsewhere": rate(*self.elsewhere), "positions_elsewhere": int(self.elsewhere[1]),
            "in_draft_vocabulary": rate(*self.in_vocabulary),
            "walk_p1_by_depth": [round(float(c), 4) for c in self.counts[:, 0] / obs],
            "walk_observations": self.observations.tolist(),
            "walk_tokens_per_pass": rate(self.new_tokens, self.passes), "walk_passes": int(self.passes),
            "new_tokens": int(self.new_tokens),
        }


def position_agreement(proposals: torch.Tensor, tokens: torch.Tensor, root: int, new_tokens: int, max_new_tokens: int,
                       vocabulary: Sequence[int] | None = None) -> PositionAgreement:
    """The counts of one greedy generation: tokens [L] (prompt through x_root, then `new_tokens` generated),
    proposals [D, L, W] (`teacher_forced_proposals`); `vocabulary`: the draft's output tokens (None: all)."""
    depth, _, width = proposals.shape
    proposals, tokens = proposals.cpu(), tokens.cpu()
    walk = spine_walk(proposals, tokens, root, new_tokens, max_new_tokens)
    end = root + new_tokens
    level = np.zeros((depth, 2), dtype=np.int64)
    for d in range(1, depth + 1):
        positions = torch.arange(root + d, end + 1)
        level[d - 1] = int((proposals[d - 1, positions, 0] == tokens[positions]).sum()), len(positions)
    first = proposals[0, root + 1: end + 1, 0] == tokens[root + 1: end + 1]
    starts = torch.zeros(len(first), dtype=torch.bool)
    starts[[r - root for r in walk.roots]] = True
    generated = tokens[root + 1: end + 1]
    known = (torch.isin(generated, torch.as_tensor(list(vocabulary))) if vocabulary is not None
             else torch.ones(len(generated), dtype=torch.bool))
    return PositionAgreement(level, np.array([int(first[starts].sum()), int(starts.sum())]),
                             np.array([int(first[~starts].sum()), int((~starts).sum())]),
                             np.array([int(known.sum()), len(known)]), walk.counts, walk.observations, walk.passes,
                             new_tokens)
