"""Self-speculation by layer skipping: the target itself, with some of its layers skipped, as the draft.

A `LayerSkip` names which layers of the target a draft pass skips; it holds no weights. The drafter
(treespec.drafters.layer_skip) runs the target's own modules through the lean decoder (treespec.models.lean) over
the layers kept, then the target's final norm and LM head, so the draft adds no parameters, only a KV cache for the
layers it runs. A skipped layer passes the residual stream on unchanged; since the draft is the target minus some
of its computation, it often agrees with the target's next token, and its passes cost about the share of the
target's time the kept layers (and the shared LM head) take. Which layers to skip is a measured choice
(treespec.plan.layer_skip). Any Llama/Qwen2-shaped target the lean decoder runs can draft for itself.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from treespec.errors import ConfigError
from treespec.models.lean import lean_unsupported


@dataclass(frozen=True)
class LayerSkip:
    """Draft with the target minus the layers `skip` (indices into its `num_layers` decoder layers).

    `search` records how the set was chosen (treespec.plan.layer_skip: agreement and cost per candidate)."""

    skip: tuple[int, ...]
    num_layers: int
    search: dict[str, Any] = field(default_factory=dict, compare=False, hash=False, repr=False)

    def __post_init__(self):
        skip = tuple(sorted({int(i) for i in self.skip}))
        if any(i < 0 or i >= self.num_layers for i in skip):
            raise ConfigError(f"layers to skip must lie in [0, {self.num_layers}), got {list(self.skip)}")
        if len(skip) >= self.num_layers:
            raise ConfigError("a layer-skip draft must keep at least one layer")
        object.__setattr__(self, "skip", skip)

    @property
    def layers(self) -> tuple[int, ...]:
        """The layers a draft pass runs, ascending."""
        return tuple(i for i in range(self.num_layers) if i not in self.skip)

    def check(self, target: torch.nn.Module) -> None:
        """Fail fast when `target` cannot draft for itself this way."""
        reason = lean_unsupported(target)
        if reason is not None:
            raise ConfigError(f"layer-skip drafting runs the target through the lean decoder, which cannot run it: "
                              f"{reason}")
        layers = target.config.get_text_config().num_hidden_layers
        if layers != self.num_layers:
            raise ConfigError(f"this layer-skip draft was chosen for a target of {self.num_layers} layers; the target "
                              f"has {layers}")

    @property
    def acceptance(self) -> list[float] | None:
        """[P_1]: the searched draft's measured greedy agreement with the target (a vector for tree planners,
        higher ranks unmeasured), or None without a search."""
        chosen = [c for c in self.search.get("candidates", ()) if c.get("skip") == list(self.skip)]
        return [float(chosen[0]["agreement"])] if chosen else None

    def describe(self) -> str:
        return f"layerskip(skip {len(self.skip)}/{self.num_layers}: {','.join(map(str, self.skip))})"

    def to_dict(self) -> dict[str, Any]:
        return {"skip": list(self.skip), "num_layers": self.num_layers, "search": self.search}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> LayerSkip:
        return cls(tuple(data["skip"]), int(data["num_layers"]), dict(data.get("search") or {}))


def skipping(target: torch.nn.Module, skip: Sequence[int]) -> LayerSkip:
    """The `LayerSkip` draft of `target` skipping layers `skip`, checked against it."""
    draft = LayerSkip(tuple(skip), target.config.get_text_config().num_hidden_layers)
    draft.check(target)
    return draft
