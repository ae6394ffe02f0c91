"""Measure the acceptance vector P_k (and a depth-resolved matrix) of a pair (config: conf/measure_acceptance.yaml).

    python experiments/measure_acceptance.py                         # default pair, greedy, held-out pool prompts
    python experiments/measure_acceptance.py sampling=t0.7 width=8 depth=3
    python experiments/measure_acceptance.py data=mtbench            # only to *report* on an evaluation set

Decodes every prompt with a spine tree (width children under each rank-0 node down to `depth`) and writes
acceptance.yaml (treespec.plan.acceptance.AcceptanceProfile) into the run directory. Measure on prompts apart from
those you evaluate on: the default data=pool holds template prompts that the default draft was not trained on and
that share nothing with MT-Bench or HumanEval. The models run as loaded (runtime=exact: fp32, standard layout),
not as this machine's profile would configure them; `draft_dtype` sets the draft's precision.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

import torch
from omegaconf import DictConfig
from tqdm import tqdm

from treespec.app import cli
from treespec.app.configs import DataSpec, HardwareSpec, ModelSpec, PairSpec, SamplingSpec, load_data, sampling_config
from treespec.app.session import open_session
from treespec.plan.acceptance import measure_acceptance


@dataclass
class MeasureAcceptanceSchema(PairSpec):
    sampling: SamplingSpec = field(default_factory=SamplingSpec)
    data: DataSpec = field(default_factory=DataSpec)
    width: int = 8
    depth: int = 1
    children: str = "without_replacement"
    max_new_tokens: int = 128
    draft_dtype: Optional[str] = None  # the draft's precision if not `dtype`, e.g. float32+bfloat16_head


def run(cfg: DictConfig):
    model, spec = cli.to_spec(ModelSpec, cfg.model), cli.to_spec(SamplingSpec, cfg.sampling)
    sampling = sampling_config(spec)
    session = open_session(model, cli.runtime(cfg), HardwareSpec(name="none"), target=cfg.target, draft=cfg.draft,
                           tune=False, draft_precision=cfg.draft_dtype)
    data = cli.to_spec(DataSpec, cfg.data)
    prompts = load_data(data, session.tokenizer)
    with tqdm(total=len(prompts), desc="acceptance", unit="prompt") as bar:
        profile = measure_acceptance(
            session.target, session.draft, [ids for _, ids in prompts], width=cfg.width, depth=cfg.depth,
            max_new_tokens=cfg.max_new_tokens, temperature=sampling.temperature, top_p=sampling.top_p,
            top_k=sampling.top_k, children=cfg.children, seed=cfg.seed,
            progress=lambda i, g: (bar.update(1), bar.set_postfix(per_pass=f"{g.mean_accepted:.2f}")),
        )
    profile.settings.update(model=model.name, target=cfg.target, draft=cfg.draft, data=data.name, layout=cfg.layout,
                            draft_weights=model.draft_weights, draft_dtype=cfg.draft_dtype, sampling=spec.name)
    path = cli.output_dir() / "acceptance.yaml"
    profile.to_yaml(path)
    print(f"P_k ({spec.name}, {data.name}, {len(prompts)} prompts): "
          f"{[round(p, 4) for p in profile.vector]} (sum {sum(profile.vector):.4f}) -> {path}")
    for depth, row in enumerate(profile.matrix[1:], start=2):
        print(f"depth {depth}: {[round(p, 4) for p in row]} ({profile.observations[depth - 1]} observations)")
    return profile


if __name__ == "__main__":
    torch.set_grad_enabled(False)
    cli.run_app(run, "measure_acceptance", {"measure_acceptance_schema": MeasureAcceptanceSchema})
