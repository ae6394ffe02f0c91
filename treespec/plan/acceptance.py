"""Measure acceptance from real decoding: the per-rank vector P_k and a depth-resolved matrix P[d, k].

The measuring tree is a *spine*: along the chain of rank-0 children, every spine node at depth < D gets
`width` children (D = `depth`; D = 1 is a star of `width` children). At depth d, a step contributes an
observation when the accepted path reached the depth-(d-1) spine node and the tree reached depth d;
the outcome is the rank accepted there, or none. Then P[d, k] = (# rank k accepted) / (# obs)
is *unconditional* over ranks (each row sums to at most 1), the quantity Sequoia's optimizer expects.
The last step of each generation is skipped (EOS or the length limit may cut its tree).
Prompts are the caller's: keep them apart from the prompts you evaluate on.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import yaml
from transformers import PreTrainedModel

from treespec.api import Generation, generate
from treespec.decode.tree import TreeShape
from treespec.drafters.policies import Static
from treespec.errors import ConfigError


def spine_tree(width: int, depth: int) -> TreeShape:
    """`width` children under each of the first `depth` nodes of a rank-0 chain."""
    if width < 1 or depth < 1:
        raise ConfigError(f"width and depth must be >= 1, got width={width}, depth={depth}")
    paths = [(0,) * d + (k,) for d in range(depth) for k in range(width)]
    return TreeShape.from_paths(paths, {"policy": "spine", "width": width, "depth": depth})


@dataclass(frozen=True)
class AcceptanceProfile:
    vector: list[float]  # P_k at depth 1, k = 1..width
    matrix: list[list[float]]  # P[d, k] for d = 1..depth
    observations: list[int]  # per depth
    settings: dict[str, Any] = field(default_factory=dict)  # width, depth, temperature, ... and the prompt count

    @property
    def mean_accepted_depth1(self) -> float:
        return float(sum(self.vector))

    def to_yaml(self, path: str | Path | None = None) -> str:
        text = yaml.safe_dump(asdict(self), sort_keys=False, default_flow_style=None)
        if path is not None:
            Path(path).write_text(text)
        return text

    @classmethod
    def from_yaml(cls, path: str | Path) -> AcceptanceProfile:
        data = yaml.safe_load(Path(path).read_text())
        try:
            return cls(**{k: data[k] for k in ("vector", "matrix", "observations")}, settings=data.get("settings", {}))
        except (KeyError, TypeError) as err:
            raise ConfigError(f"{path} is not an acceptance profile (needs vector, matrix, observations)") from err


def count_outcomes(generations: Sequence[Generation], width: int, depth: int) -> tuple[np.ndarray, np.ndarray]:
    """(accepted-rank counts [depth, width], observations [depth]) from spine-tree generations."""
    counts = np.zeros((depth, width), dtype=np.int64)
    observed = np.zeros(depth, dtype=np.int64)
    for generation in generations:
        for step in generation.steps[:-1]:
            add_step_outcome(counts, observed, step.accepted_ranks, step.tree_depth)
    return counts, observed


def add_step_outcome(counts: np.ndarray, observed: np.ndarray, ranks: Sequence[int], tree_depth: int) -> None:
    """Count one spine-tree step into counts [depth, width] and observations [depth], in place: `ranks` the accepted
    sibling ranks by depth, `tree_depth` the drafted tree's levels including the root."""
    for d in range(len(observed)):  # observation at depth d + 1
        if tree_depth < d + 2 or any(r != 0 for r in ranks[:d]) or len(ranks) < d:
            break
        observed[d] += 1
        if len(ranks) > d:
            counts[d, ranks[d]] += 1


def measure_acceptance(
    target: PreTrainedModel,
    draft: PreTrainedModel,
    prompts: Sequence[Sequence[int]],
    *,
    width: int = 8,
    depth: int = 1,
    max_new_tokens: int = 128,
    temperature: float = 0.0,
    top_p: float = 1.0,
    top_k: int = 0,
    children: str = "without_replacement",
    seed: int = 0,
    eos_token_id: int | Sequence[int] | None = None,
    progress: Callable[[int, Generation], None] | None = None,
) -> AcceptanceProfile:
    """Decode every prompt with a spine tree and return the measured acceptance profile."""
    if not prompts:
        raise ConfigError("measure_acceptance needs at least one prompt")
    policy = Static(spine_tree(width, depth), children=children, name="spine")
    generations = []
    for index, prompt in enumerate(prompts):
        generation = generate(target, draft, prompt, tree=policy, max_new_tokens=max_new_tokens,
                              temperature=temperature, top_p=top_p, top_k=top_k, seed=seed + index,
                              eos_token_id=eos_token_id)
        generations.append(generation)
        if progress is not None:
            progress(index, generation)
    counts, observed = count_outcomes(generations, width, depth)
    matrix = counts / np.maximum(observed, 1)[:, None]
    settings = {"width": width, "depth": depth, "temperature": temperature, "top_p": top_p, "top_k": top_k,
                "children": children if temperature > 0 else "greedy", "max_new_tokens": max_new_tokens,
                "prompts": len(prompts), "target_passes": int(sum(g.target_passes for g in generations)),
                "new_tokens": int(sum(len(g.tokens) for g in generations))}
    return AcceptanceProfile(matrix[0].tolist(), matrix.tolist(), observed.tolist(), settings)
