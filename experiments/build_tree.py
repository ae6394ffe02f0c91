"""Acceptance profile + hardware profile -> a Sequoia tree YAML with provenance (config: conf/build_tree.yaml).

    python experiments/build_tree.py acceptance_file=outputs/measure_acceptance/.../acceptance.yaml
    python experiments/build_tree.py acceptance_file=... budget=16 max_depth=6      # fixed size, no hardware model
    python experiments/run.py tree=file tree.file=<the tree.yaml written here>

With budget and max_depth null the hardware-aware optimizer picks them, maximising G(n, d) / (t(n) + (d-1) c).
The tree YAML records the acceptance vector, the latency profile, the choice and the command that made it.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from typing import Optional

import torch
from omegaconf import DictConfig

from treespec import cli
from treespec.acceptance import AcceptanceProfile
from treespec.configs import HardwareSpec, latency_profile
from treespec.errors import ConfigError
from treespec.optimizer import choose_tree_size, expected_tokens, sequoia_tree
from treespec.tree import TreeShape


@dataclass
class BuildTreeSchema:
    hardware: HardwareSpec = field(default_factory=HardwareSpec)
    acceptance_file: str = "???"
    use_depth_matrix: bool = False  # use the depth-resolved matrix instead of the depth-1 vector
    budget: Optional[int] = None
    max_depth: Optional[int] = None
    max_budget: int = 64
    max_depth_limit: int = 12


def run(cfg: DictConfig) -> TreeShape:
    profile = AcceptanceProfile.from_yaml(cfg.acceptance_file)
    accept = profile.matrix if cfg.use_depth_matrix else profile.vector
    hardware = cli.to_spec(HardwareSpec, cfg.hardware)
    latency = latency_profile(hardware)
    provenance = {"command": " ".join(sys.argv), "acceptance_file": str(cfg.acceptance_file),
                  "acceptance_settings": profile.settings}
    if cfg.budget is None or cfg.max_depth is None:
        if latency is None:
            raise ConfigError("without budget and max_depth the hardware-aware choice needs hardware=<profile>")
        choice = choose_tree_size(accept, latency.relative_latency, latency.draft_cost,
                                  max_budget=cfg.budget or cfg.max_budget, max_depth=cfg.max_depth or cfg.max_depth_limit)
        budget, depth = choice.budget, choice.max_depth
        provenance.update(hardware=hardware.name, relative_latency=latency.relative_latency,
                          draft_cost=latency.draft_cost, predicted_speedup=choice.predicted_speedup)
    else:
        budget, depth = cfg.budget, cfg.max_depth
    tree = sequoia_tree(accept, budget, depth)
    tree = TreeShape(tree.parents, {**tree.provenance, **provenance})
    path = cli.output_dir() / "tree.yaml"
    tree.to_yaml(path)
    print(f"Sequoia tree: budget {budget}, depth {depth} (levels used {tree.levels}), expected tokens per pass "
          f"{expected_tokens(tree, accept):.3f}" + (f", predicted speedup {provenance['predicted_speedup']:.2f}x"
                                                   if "predicted_speedup" in provenance else "") + f" -> {path}")
    return tree


if __name__ == "__main__":
    torch.set_grad_enabled(False)
    cli.run_app(run, "build_tree", {"build_tree_schema": BuildTreeSchema})
