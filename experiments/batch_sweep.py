"""Where trees stop paying: batch sizes x tree policies on the same prompts, in one process (conf/batch_sweep.yaml).

    python experiments/batch_sweep.py                                   # default pair, 16 MT-Bench prompts, B 1..16
    python experiments/batch_sweep.py batch_sizes=[1,2,4,8] data.limit=32 max_new_tokens=128
    python experiments/batch_sweep.py model=tiny hardware.repeats=1 data=pool data.limit=4 batch_sizes=[1,2]

For every batch size B the prompts are taken B at a time and every method decodes each group as one batch, in a
rotating order (treespec.eval.bench): treespec's batched autoregressive loop (a one-node tree through the same
engine), fixed Sequoia trees, the tree planned for B (`tree=sequoia` without budget: t(B, n), c_B(w) and the
engine's overheads at B from a profile measured on demand by hardware=auto and cached), and transformers
`generate` on the same group as one left-padded batch (hf_generate). Greedy outputs are checked against
hf_generate's (or, without it, the autoregressive method's).

Writes into the Hydra run directory: batch_sweep.csv (one row per (B, method): tokens/s, tokens per pass per row,
measured speedup over batched autoregressive and over hf_generate at the same B, and the predicted values next to
them), batch_sweep_rows.jsonl (one row per group x method), plans.csv (the tree planned per B), batch_profile.yaml
(the profile planned with) and batch_sweep.json (all of it, with the crossover: the first B where the plan falls
back to no tree, and the first B where no tree measured faster than autoregressive).
"""

from __future__ import annotations

import csv
import json
from dataclasses import dataclass, field
from typing import Optional

import torch
from omegaconf import DictConfig, OmegaConf
from tqdm import tqdm

from treespec.app import cli
from treespec.app.configs import (
    DataSpec,
    HardwareSpec,
    ModelSpec,
    PairSpec,
    SamplingSpec,
    TreeSpec,
    acceptance_for,
    load_data,
    sampling_config,
)
from treespec.app.session import open_session
from treespec.errors import ConfigError
from treespec.eval.bench import PassCounter, hf_method, run_bench, treespec_method
from treespec.eval.reporting import format_sweep, sweep_crossover, sweep_table
from treespec.plan.planner import format_plans, plan_tree


@dataclass
class BatchSweepSchema(PairSpec):
    data: DataSpec = field(default_factory=DataSpec)
    hardware: HardwareSpec = field(default_factory=HardwareSpec)
    sampling: SamplingSpec = field(default_factory=SamplingSpec)
    batch_sizes: list[int] = field(default_factory=lambda: [1, 2, 4, 8, 16])
    methods: list[str] = field(default_factory=lambda: ["hf_generate", "autoregressive", "planned"])
    trees: dict[str, TreeSpec] = field(default_factory=dict)  # treespec method name -> its tree (planned per B)
    sizes: Optional[list[int]] = None  # tree sizes timed per B in the profile (None: the device's default)
    max_new_tokens: int = 128


def run(cfg: DictConfig) -> dict:
    model, hardware = cli.to_spec(ModelSpec, cfg.model), cli.to_spec(HardwareSpec, cfg.hardware)
    spec = cli.to_spec(SamplingSpec, cfg.sampling)
    sampling = sampling_config(spec)
    methods, sizes = list(cfg.methods), sorted({int(b) for b in cfg.batch_sizes})
    unknown = [m for m in methods if m != "hf_generate" and m not in cfg.trees]
    if unknown or not sizes or sizes[0] < 1 or "autoregressive" not in methods:
        raise ConfigError(f"methods must include autoregressive and be hf_generate or keys of trees (unknown: "
                          f"{unknown}); batch_sizes must be >= 1 (got {sizes})")
    trees = {m: cli.to_spec(TreeSpec, cfg.trees[m]) for m in methods if m != "hf_generate"}
    session = open_session(model, cli.runtime(cfg), hardware, target=cfg.target, draft=cfg.draft, sampling=sampling,
                           progress=cli.progress_bar())
    batch_profile, origin = session.profile_batches(sizes, list(cfg.sizes) if cfg.sizes else None)
    print(f"batch sweep on {session.describe()}; batch profile {origin}", flush=True)
    out_dir = cli.output_dir()
    acceptance = acceptance_for(model, TreeSpec(), sampling)
    plans = [plan_tree(acceptance, batch_profile.step_costs(b)) for b in sizes] if batch_profile and acceptance else []
    if plans:
        print("the tree planned per batch size:\n" + format_plans(plans), flush=True)
        batch_profile.to_yaml(out_dir / "batch_profile.yaml")
    choices = {(b, m): session.policy(tree, sampling, b) for b in sizes for m, tree in trees.items()}
    prompts = load_data(cli.to_spec(DataSpec, cfg.data), session.tokenizer)
    eos = session.tokenizer.eos_token_id
    pad = session.tokenizer.pad_token_id or eos or 0
    counter = PassCounter(session.target)
    rows = []
    total = sum(len(methods) * -(-len(prompts) // b) for b in sizes)
    with open(out_dir / "batch_sweep_rows.jsonl", "w") as row_file, tqdm(total=total, desc="sweep", unit="batch") as bar:
        def on_row(row: dict) -> None:
            row_file.write(json.dumps(row) + "\n")
            bar.update(1)

        for size in sizes:
            decoders = {(spec.name, m): hf_method(session.target, counter, eos, pad) if m == "hf_generate" else
                        treespec_method(session.target, session.draft, choices[size, m].policy, eos)
                        for m in methods}
            ar_rate = batch_profile.step_costs(size).autoregressive_tokens_per_second if batch_profile else None

            def info(_: str, method: str, size=size, ar_rate=ar_rate) -> dict:
                choice = choices[size, method].info if method != "hf_generate" else {}
                speedup = choice.get("predicted_speedup")
                return {"budget": choice.get("budget"), "depth": choice.get("depth"),
                        "predicted_accepted": choice.get("predicted_accepted"), "predicted_speedup": speedup,
                        "predicted_tokens_per_second": ar_rate * speedup if speedup and ar_rate else None}

            groups = [prompts[i: i + size] for i in range(0, len(prompts), size)]
            rows += run_bench(decoders, groups, {spec.name: sampling}, seed=cfg.seed, max_new_tokens=cfg.max_new_tokens,
                              reference="hf_generate" if "hf_generate" in methods else "autoregressive", info=info,
                              on_row=on_row, warmup_tokens=4)
    table = sweep_table(rows)
    print(format_sweep(table))
    plan_rows = [plan.describe() for plan in plans]
    found = sweep_crossover(table, plan_rows)
    print(f"crossover: plan chooses no tree from B = {found['predicted_no_tree_from']}, no tree measured faster than "
          f"autoregressive from B = {found['measured_no_tree_from']} (None: trees paid at every B tried)")
    for name, data in (("batch_sweep.csv", table), ("plans.csv", plan_rows)):
        if data:
            with open(out_dir / name, "w", newline="") as handle:
                writer = csv.DictWriter(handle, fieldnames=list(dict.fromkeys(k for row in data for k in row)))
                writer.writeheader()
                writer.writerows(data)
    settings = {"config": OmegaConf.to_container(cfg, resolve=True), "threads": torch.get_num_threads(),
                "hardware": {**session.summary(), "batch_profile": origin}, "acceptance": acceptance,
                "policies": {f"{b}/{m}": c.info for (b, m), c in choices.items()}}
    result = {"table": table, "plans": plan_rows, "crossover": found,
              "profile": batch_profile.to_dict() if batch_profile is not None else None, "settings": settings}
    (out_dir / "batch_sweep.json").write_text(json.dumps(result, indent=1, default=str))
    print(f"-> {out_dir}")
    return result


if __name__ == "__main__":
    torch.set_grad_enabled(False)
    cli.run_app(run, "batch_sweep", {"batch_sweep_schema": BatchSweepSchema})
