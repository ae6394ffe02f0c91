"""Acceptance profile + hardware profile -> a Sequoia tree YAML with provenance (config: conf/build_tree.yaml).

    python experiments/build_tree.py acceptance_file=outputs/measure_acceptance/.../acceptance.yaml
    python experiments/build_tree.py acceptance_file=... budget=16                  # the planner picks the depth
    python experiments/build_tree.py acceptance_file=... budget=16 max_depth=6      # fixed size, no hardware model
    python experiments/build_tree.py acceptance_file=... hardware=cpu_smollm2       # a named profile
    python experiments/run.py tree=file tree.file=<the tree.yaml written here>

With budget or max_depth left null the hardware-aware planner (treespec.plan.planner.plan_tree) fills them in,
maximising predicted tokens per second from t(n), the draft's cost per level width and the engine's per-step
overhead. hardware=auto (the default) loads the model group's pair to find (or measure) this machine's
profile. The tree YAML records the acceptance, the latency profile, the choice and the command that made it.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from typing import Optional

import torch
from omegaconf import DictConfig

from treespec.app import cli
from treespec.app.configs import HardwareSpec, ModelSpec, RuntimeSpec, latency_profile
from treespec.app.session import open_session
from treespec.decode.tree import TreeShape
from treespec.errors import ConfigError
from treespec.plan.acceptance import AcceptanceProfile
from treespec.plan.optimizer import expected_tokens, sequoia_tree
from treespec.plan.planner import plan_tree


@dataclass
class BuildTreeSchema(RuntimeSpec):
    model: ModelSpec = field(default_factory=ModelSpec)  # hardware=auto: the pair whose profile is used
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
    provenance = {"command": " ".join(sys.argv), "acceptance_file": str(cfg.acceptance_file),
                  "acceptance_settings": profile.settings}
    if cfg.budget is not None and cfg.max_depth is not None:
        tree = sequoia_tree(accept, cfg.budget, cfg.max_depth)
    else:
        if hardware.name == "auto":
            model = cli.to_spec(ModelSpec, cfg.model)
            model.acceptance_greedy = accept  # the target's configuration is chosen by planning with this acceptance
            resolved = open_session(model, cli.runtime(cfg), hardware, progress=cli.progress_bar()).hardware
            latency, origin = resolved.profile, resolved.origin
        else:
            latency, origin = latency_profile(hardware), f"named profile '{hardware.name}'"
        if latency is None:
            raise ConfigError("without budget and max_depth the planner needs a hardware profile: hardware=auto "
                              "(the default) or hardware=<name>")
        plan = plan_tree(accept, latency.step_costs(), budget=cfg.budget, max_depth=cfg.max_depth,
                         max_budget=cfg.max_budget, max_depth_limit=cfg.max_depth_limit)
        tree = plan.tree
        provenance.update(hardware=hardware.name, hardware_origin=origin, relative_latency=latency.relative_latency(),
                          draft_costs=latency.draft_costs(), draft_cost=latency.draft_cost(),
                          overhead=latency.step_costs().overhead, predicted_speedup=plan.predicted_speedup,
                          given=plan.describe()["given"], chosen=plan.describe()["chosen"])
    tree = TreeShape(tree.parents, {**tree.provenance, **provenance})
    path = cli.output_dir() / "tree.yaml"
    tree.to_yaml(path)
    print(f"Sequoia tree: budget {tree.size}, depth {tree.levels}, expected tokens per pass "
          f"{expected_tokens(tree, accept):.3f}" + (f", predicted speedup {provenance['predicted_speedup']:.2f}x"
                                                   if "predicted_speedup" in provenance else "") + f" -> {path}")
    return tree


if __name__ == "__main__":
    torch.set_grad_enabled(False)
    cli.run_app(run, "build_tree", {"build_tree_schema": BuildTreeSchema})
