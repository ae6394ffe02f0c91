"""Decode a prompt set with one configuration (config: conf/run.yaml).

    python experiments/run.py                                   # default pair, Sequoia, MT-Bench, greedy
    python experiments/run.py tree=dynamic sampling=t0.7 data.limit=20
    python experiments/run.py experiment=humaneval_chain
    python experiments/run.py -m tree.budget=4,8,16,32 tree.max_depth=3,5,7     # a sweep, one dir per job
    python experiments/run.py -m tree.budget=4,8,16,32                            # the planner picks each depth
    python experiments/run.py batch_size=4          # prompts decoded 4 at a time (generate_batch), tree planned for B=4

Writes into the Hydra run directory: metrics.jsonl (one row per target pass, one per prompt), summary.json
(tokens_per_second, new_tokens, target_passes, mean_accepted, predicted_accepted, phase timings, policy with
the values given and chosen, and the hardware profile: device, dtype, layout and where the profile came from).
With batch_size=B > 1 the prompts are decoded B at a time by `treespec.generate_batch` (row seeds as at B = 1),
the tree is chosen with B's costs (a batch profile: hardware=auto measures it on demand and caches it), and
summary.json's seconds / tokens_per_second are wall time over all batches (rows of a batch overlap in time);
mean_accepted stays tokens per pass per row, and batched_passes counts the target's batched passes.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Optional

import torch
from omegaconf import DictConfig, OmegaConf
from tqdm import tqdm

from treespec import cli
from treespec.batch import generate_batch
from treespec.configs import (
    DataSpec,
    HardwareSpec,
    ModelSpec,
    SamplingSpec,
    TreeSpec,
    acceptance_for,
    build_batch_policy,
    build_policy,
    check_hardware,
    load_data,
    load_pair,
    resolve_batch_hardware,
    resolve_device,
    resolve_hardware,
    sampling_config,
    with_draft_vocab,
)
from treespec.engine import generate
from treespec.errors import ConfigError
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
    layout: str = "auto"  # auto (measured) | standard | transposed | onednn | hybrid:<rows> | packed:<rows>
    threads: int = 0  # torch intra-op threads; 0 = torch's default
    batch_size: int = 1  # > 1: decode the prompts B at a time with treespec.generate_batch
    target: str = "${model.target}"
    draft: Optional[str] = "${model.draft}"


def run(cfg: DictConfig) -> dict:
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    model, tree = cli.to_spec(ModelSpec, cfg.model), cli.to_spec(TreeSpec, cfg.tree)
    sampling = sampling_config(cli.to_spec(SamplingSpec, cfg.sampling))
    hardware = cli.to_spec(HardwareSpec, cfg.hardware)
    acceptance = acceptance_for(model, tree, sampling)
    if cfg.batch_size < 1:
        raise ConfigError(f"batch_size must be >= 1, got {cfg.batch_size}")
    if cfg.batch_size == 1:  # at B > 1 the batch profile is checked where it is resolved (build_batch_policy)
        check_hardware(tree, hardware)
    pair = load_pair(cfg.target, cfg.draft if tree.policy != "autoregressive" else None,
                     device=resolve_device(cfg.device), dtype=cfg.dtype,
                     attn_implementation=model.attn_implementation, layout=cfg.layout)
    pair = with_draft_vocab(pair, model.draft_vocab if tree.policy != "autoregressive" else None)
    pair = resolve_hardware(hardware, pair, dtype=cfg.dtype, layout=cfg.layout, acceptance=acceptance,
                            progress=cli.progress_bar(), settings={"target": cfg.target, "draft": cfg.draft})
    if cfg.batch_size > 1:
        if pair.draft_vocab is not None:
            raise ConfigError("model.draft_vocab is for batch_size=1; the batch engine drafts the full vocabulary")
        return run_batched(cfg, tree, acceptance, sampling, hardware, pair)
    choice = build_policy(tree, acceptance, pair.hardware.profile, pair.hardware.name)
    print(f"{cfg.name}: tree {choice.info['policy']}, budget {choice.info.get('budget')}, depth "
          f"{choice.info.get('depth')}; {pair.hardware.device}; hardware profile {pair.hardware.origin}", flush=True)
    prompts = load_data(cli.to_spec(DataSpec, cfg.data), pair.tokenizer)
    out_dir = cli.output_dir()
    generations = []
    with open(out_dir / "metrics.jsonl", "w") as metrics, tqdm(prompts, desc=cfg.name, unit="prompt") as bar:
        for index, (prompt, ids) in enumerate(bar):
            generation = generate(pair.target, pair.draft, ids, tree=choice.policy, draft_vocab=pair.draft_vocab,
                                  max_new_tokens=cfg.max_new_tokens,
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


def run_batched(cfg: DictConfig, tree: TreeSpec, acceptance, sampling, hardware: HardwareSpec, pair) -> dict:
    """run() at batch_size > 1: the tree planned for B, the prompts decoded B at a time."""
    size = int(cfg.batch_size)
    profile, origin = resolve_batch_hardware(hardware, pair, (size,), progress=cli.progress_bar(),
                                             settings={"target": cfg.target, "draft": cfg.draft})
    choice = build_batch_policy(tree, acceptance, profile, size, pair.hardware.name)
    print(f"{cfg.name}: batch size {size}, tree {choice.info['policy']}, budget {choice.info.get('budget')}, depth "
          f"{choice.info.get('depth')}" + (f", predicted {choice.info['predicted_speedup']:.2f}x over batched "
                                           "autoregressive" if choice.info.get("predicted_speedup") else "")
          + f"; {pair.hardware.device}; batch profile {origin}", flush=True)
    prompts = load_data(cli.to_spec(DataSpec, cfg.data), pair.tokenizer)
    out_dir = cli.output_dir()
    generations, wall, batched_passes = [], 0.0, 0
    groups = [list(range(i, min(i + size, len(prompts)))) for i in range(0, len(prompts), size)]
    with open(out_dir / "metrics.jsonl", "w") as metrics, tqdm(total=len(prompts), desc=cfg.name, unit="prompt") as bar:
        for number, group in enumerate(groups):
            start = time.perf_counter()
            outs = generate_batch(pair.target, pair.draft, [prompts[i][1] for i in group], tree=choice.policy,
                                  max_new_tokens=cfg.max_new_tokens, temperature=sampling.temperature,
                                  top_p=sampling.top_p, top_k=sampling.top_k, seed=[cfg.seed + i for i in group])
            seconds = time.perf_counter() - start
            wall, batched_passes = wall + seconds, batched_passes + max(g.target_passes for g in outs)
            for index, generation in zip(group, outs):
                generations.append(generation)
                meta = {"prompt_id": prompts[index][0].id, "category": prompts[index][0].category, "batch": number}
                for row in pass_rows(generation, meta) + [prompt_row(generation, meta)]:
                    metrics.write(json.dumps(row) + "\n")
            bar.update(len(group))
            bar.set_postfix(tok_s=f"{sum(len(g.tokens) for g in outs) / seconds:.1f}")
    summary = summarise(generations, choice.info)
    summary.update(seconds=wall, tokens_per_second=summary["new_tokens"] / wall if wall else float("nan"),
                   batch_size=size, batches=len(groups), batched_passes=batched_passes,
                   row_seconds=sum(g.seconds for g in generations))
    summary["hardware"] = {**pair.hardware.summary(), "batch_profile": origin}
    summary["config"] = OmegaConf.to_container(cfg, resolve=True)
    (out_dir / "summary.json").write_text(json.dumps(summary, indent=1))
    print(f"{cfg.name}: {summary['tokens_per_second']:.2f} tokens/s at batch size {size}, "
          f"{summary['mean_accepted']:.3f} tokens/pass per row"
          + (f" (predicted {summary['predicted_accepted']:.3f})" if summary["predicted_accepted"] else "")
          + f" -> {out_dir}")
    return summary


if __name__ == "__main__":
    torch.set_grad_enabled(False)
    cli.run_app(run, "run", {"run_schema": RunSchema})
