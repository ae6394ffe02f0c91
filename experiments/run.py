"""Decode a prompt set with one configuration (config: conf/run.yaml).

    python experiments/run.py                                   # default pair, Sequoia, MT-Bench, greedy
    python experiments/run.py tree=dynamic sampling=t0.7 data.limit=20
    python experiments/run.py experiment=humaneval_chain
    python experiments/run.py -m tree.budget=4,8,16,32 tree.max_depth=3,5,7     # a sweep, one dir per job
    python experiments/run.py -m tree.budget=4,8,16,32                            # the planner picks each depth

Writes into the Hydra run directory: metrics.jsonl (one row per target pass, one per prompt), summary.json
(tokens_per_second, new_tokens, target_passes, mean_accepted, predicted_accepted, phase timings, policy with
the values given and chosen, and the hardware profile: device, dtype, layout and where the profile came from).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Optional

import torch
from omegaconf import DictConfig, OmegaConf
from tqdm import tqdm

from treespec import cli
from treespec.configs import (
    DataSpec,
    HardwareSpec,
    ModelSpec,
    SamplingSpec,
    TreeSpec,
    acceptance_for,
    build_policy,
    check_hardware,
    load_data,
    load_pair,
    resolve_device,
    resolve_hardware,
    sampling_config,
)
from treespec.engine import generate
from treespec.reporting import pass_rows, prompt_row, summarise


@dataclass
class RunSchema:
    model: ModelSpec = field(default_factory=ModelSpec)
    tree: TreeSpec = field(default_factory=TreeSpec)
    sampling: SamplingSpec = field(default_factory=SamplingSpec)
    data: DataSpec = field(default_factory=DataSpec)
    hardware: HardwareSpec = field(default_factory=HardwareSpec)
    name: str = "default"  # experiment name: the output directory's middle part
    max_new_tokens: int = 128
    seed: int = 0
    device: str = "auto"
    dtype: str = "float32"  # or auto: fp32 or bf16 per model, by measurement (hardware=auto)
    layout: str = "auto"  # auto (measured) | standard | transposed
    threads: int = 0  # torch intra-op threads; 0 = torch's default
    target: str = "${model.target}"
    draft: Optional[str] = "${model.draft}"


def run(cfg: DictConfig) -> dict:
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    model, tree = cli.to_spec(ModelSpec, cfg.model), cli.to_spec(TreeSpec, cfg.tree)
    sampling = sampling_config(cli.to_spec(SamplingSpec, cfg.sampling))
    hardware = cli.to_spec(HardwareSpec, cfg.hardware)
    acceptance = acceptance_for(model, tree, sampling)
    check_hardware(tree, hardware)
    pair = load_pair(cfg.target, cfg.draft if tree.policy != "autoregressive" else None,
                     device=resolve_device(cfg.device), dtype=cfg.dtype,
                     attn_implementation=model.attn_implementation, layout=cfg.layout)
    pair = resolve_hardware(hardware, pair, dtype=cfg.dtype, layout=cfg.layout, acceptance=acceptance,
                            progress=cli.progress_bar(), settings={"target": cfg.target, "draft": cfg.draft})
    choice = build_policy(tree, acceptance, pair.hardware.profile, pair.hardware.name)
    print(f"{cfg.name}: tree {choice.info['policy']}, budget {choice.info.get('budget')}, depth "
          f"{choice.info.get('depth')}; {pair.hardware.device}; hardware profile {pair.hardware.origin}", flush=True)
    prompts = load_data(cli.to_spec(DataSpec, cfg.data), pair.tokenizer)
    out_dir = cli.output_dir()
    generations = []
    with open(out_dir / "metrics.jsonl", "w") as metrics, tqdm(prompts, desc=cfg.name, unit="prompt") as bar:
        for index, (prompt, ids) in enumerate(bar):
            generation = generate(pair.target, pair.draft, ids, tree=choice.policy, max_new_tokens=cfg.max_new_tokens,
                                  temperature=sampling.temperature, top_p=sampling.top_p, top_k=sampling.top_k,
                                  seed=cfg.seed + index)
            generations.append(generation)
            meta = {"prompt_id": prompt.id, "category": prompt.category}
            for row in pass_rows(generation, meta) + [prompt_row(generation, meta)]:
                metrics.write(json.dumps(row) + "\n")
            bar.set_postfix(tok_s=f"{generation.tokens_per_second:.1f}", per_pass=f"{generation.mean_accepted:.2f}")
    summary = summarise(generations, choice.info)
    summary["hardware"] = pair.hardware.summary()
    summary["config"] = OmegaConf.to_container(cfg, resolve=True)
    (out_dir / "summary.json").write_text(json.dumps(summary, indent=1))
    print(f"{cfg.name}: {summary['tokens_per_second']:.2f} tokens/s, {summary['mean_accepted']:.3f} tokens/pass"
          + (f" (predicted {summary['predicted_accepted']:.3f})" if summary["predicted_accepted"] else "")
          + f" -> {out_dir}")
    return summary


if __name__ == "__main__":
    torch.set_grad_enabled(False)
    cli.run_app(run, "run", {"run_schema": RunSchema})
