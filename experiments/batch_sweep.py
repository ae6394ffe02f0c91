"""Where trees stop paying: batch sizes x tree policies on the same prompts, in one process (conf/batch_sweep.yaml).

    python experiments/batch_sweep.py                                   # default pair, 16 MT-Bench prompts, B 1..16
    python experiments/batch_sweep.py batch_sizes=[1,2,4,8] data.limit=32 max_new_tokens=128
    python experiments/batch_sweep.py model=tiny hardware.repeats=1 data=pool data.limit=4 batch_sizes=[1,2]

For every batch size B the prompts are taken B at a time and every method decodes each group as one batch, in
a rotating order: treespec's batched autoregressive loop (a one-node tree through `generate_batch`, the same
code path), fixed Sequoia trees, the tree planned for B (`treespec.batch_plan.plan_for_batch`: t_B(n), c_B(w)
and the batched engine's overheads from a batch profile measured on demand by hardware=auto and cached), and
transformers `generate` on the same group as one left-padded batch (hf_generate). Greedy outputs are checked
against hf_generate's (or, without it, the autoregressive method's).

Writes into the Hydra run directory: batch_sweep.csv (one row per (B, method): tokens/s, tokens per pass per
row, measured speedup over batched autoregressive and over hf_generate at the same B, and the predicted
values next to them), batch_sweep_rows.jsonl (one row per group x method), plans.csv (the tree chosen per B),
batch_profile.yaml (the profile planned with) and batch_sweep.json (all of it, with the crossover: the first B
where the plan falls back to no tree, and the first B where no tree measured faster than autoregressive).
"""

from __future__ import annotations

import csv
import json
import time
from dataclasses import dataclass, field
from typing import Any, Optional

import torch
from bench import PassCounter, hf_decode_batch
from omegaconf import DictConfig, OmegaConf
from tqdm import tqdm

from treespec import cli
from treespec.batch import generate_batch
from treespec.batch_plan import format_plan_rows, plan_batches, plan_rows
from treespec.configs import (
    DataSpec,
    HardwareSpec,
    ModelSpec,
    SamplingSpec,
    TreeSpec,
    acceptance_for,
    build_batch_policy,
    load_data,
    load_pair,
    resolve_batch_hardware,
    resolve_device,
    resolve_hardware,
    sampling_config,
)
from treespec.errors import ConfigError

BASELINE = "autoregressive"


@dataclass
class BatchSweepSchema:
    model: ModelSpec = field(default_factory=ModelSpec)
    data: DataSpec = field(default_factory=DataSpec)
    hardware: HardwareSpec = field(default_factory=HardwareSpec)
    sampling: SamplingSpec = field(default_factory=SamplingSpec)
    batch_sizes: list[int] = field(default_factory=lambda: [1, 2, 4, 8, 16])
    methods: list[str] = field(default_factory=lambda: ["hf_generate", "autoregressive", "planned"])
    trees: dict[str, TreeSpec] = field(default_factory=dict)  # treespec method name -> its tree (planned per B)
    sizes: Optional[list[int]] = None  # tree sizes timed per B in the batch profile (None: the device's default)
    max_new_tokens: int = 128
    seed: int = 0
    device: str = "auto"
    dtype: str = "float32"
    layout: str = "auto"
    threads: int = 0
    target: str = "${model.target}"
    draft: Optional[str] = "${model.draft}"


def sweep_table(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per (batch_size, method) from per-group rows: totals, tokens/s, tokens per pass per row, measured
    speedups over batched autoregressive and hf_generate at the same B, and over autoregressive at B = 1."""
    groups: dict[tuple[int, str], list[dict[str, Any]]] = {}
    for row in rows:
        groups.setdefault((row["batch_size"], row["method"]), []).append(row)
    table = []
    for (size, method), members in sorted(groups.items()):
        tokens, seconds = sum(r["tokens"] for r in members), sum(r["seconds"] for r in members)
        passes = sum(r["passes"] for r in members)
        parity = [r["matches_reference"] for r in members if r.get("matches_reference") is not None]
        first = members[0]
        table.append({"batch_size": size, "method": method, "budget": first.get("budget"), "depth": first.get("depth"),
                      "groups": len(members), "tokens": tokens, "seconds": round(seconds, 4),
                      "tokens_per_second": tokens / seconds if seconds else float("nan"),
                      "tokens_per_pass": tokens / passes if passes else float("nan"),
                      "batched_passes": sum(r["batched_passes"] for r in members),
                      "predicted_tokens_per_pass": first.get("predicted_accepted"),
                      "predicted_speedup": first.get("predicted_speedup"),
                      "predicted_tokens_per_second": first.get("predicted_tokens_per_second"),
                      "greedy_parity": sum(parity) / len(parity) if parity else None})
    for row in table:
        same = {r["method"]: r for r in table if r["batch_size"] == row["batch_size"]}
        for name, key in ((BASELINE, "speedup"), ("hf_generate", "speedup_vs_hf")):
            row[key] = row["tokens_per_second"] / same[name]["tokens_per_second"] if name in same else None
        single = [r for r in table if r["batch_size"] == 1 and r["method"] == BASELINE]
        row["throughput_vs_b1"] = row["tokens_per_second"] / single[0]["tokens_per_second"] if single else None
    return table


def crossover(table: list[dict[str, Any]], plans: list[dict[str, Any]]) -> dict[str, Any]:
    """The first B where the plan chooses no tree, and the first B where no treespec tree measured faster than the
    batched autoregressive loop (None: trees paid at every B tried)."""
    measured = None
    for size in sorted({r["batch_size"] for r in table}):
        trees = [r for r in table if r["batch_size"] == size and r["method"] not in (BASELINE, "hf_generate")
                 and (r["budget"] or 0) > 1]
        if trees and all((r["speedup"] or 0) <= 1 for r in trees):
            measured = size
            break
    predicted = next((r["batch_size"] for r in plans if not r["speculates"]), None)
    best = {}
    for size in sorted({r["batch_size"] for r in table}):
        rows = [r for r in table if r["batch_size"] == size and r["method"] != "hf_generate"]
        top = max(rows, key=lambda r: r["tokens_per_second"])
        best[size] = {"method": top["method"], "budget": top["budget"], "tokens_per_second": top["tokens_per_second"]}
    return {"predicted_no_tree_from": predicted, "measured_no_tree_from": measured, "fastest_per_batch": best}


def format_sweep(table: list[dict[str, Any]]) -> str:
    header = ("B", "method", "n", "tokens/s", "tok/pass", "pred. tok/pass", "vs AR", "pred. vs AR", "vs HF", "parity")
    lines = [header]

    def num(value, digits=2, suffix=""):
        return "-" if value is None else f"{value:.{digits}f}{suffix}"

    for r in table:
        lines.append((str(r["batch_size"]), r["method"], "-" if r["budget"] is None else str(r["budget"]),
                      num(r["tokens_per_second"]), num(r["tokens_per_pass"]), num(r["predicted_tokens_per_pass"]),
                      num(r["speedup"], 2, "x"), num(r["predicted_speedup"], 2, "x"), num(r["speedup_vs_hf"], 2, "x"),
                      "-" if r["greedy_parity"] is None else f"{100 * r['greedy_parity']:.0f}%"))
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(line, widths)).rstrip() for line in lines)


def run(cfg: DictConfig) -> dict:
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    model = cli.to_spec(ModelSpec, cfg.model)
    hardware = cli.to_spec(HardwareSpec, cfg.hardware)
    spec = cli.to_spec(SamplingSpec, cfg.sampling)
    sampling = sampling_config(spec)
    methods, sizes = list(cfg.methods), sorted({int(b) for b in cfg.batch_sizes})
    unknown = [m for m in methods if m != "hf_generate" and m not in cfg.trees]
    if unknown or not sizes or sizes[0] < 1 or BASELINE not in methods:
        raise ConfigError(f"methods must include {BASELINE} and be hf_generate or keys of trees (unknown: {unknown}); "
                          f"batch_sizes must be >= 1 (got {sizes})")
    trees = {m: cli.to_spec(TreeSpec, cfg.trees[m]) for m in methods if m != "hf_generate"}
    acceptance = acceptance_for(model, TreeSpec(), sampling)
    pair = load_pair(cfg.target, cfg.draft, device=resolve_device(cfg.device), dtype=cfg.dtype,
                     attn_implementation=model.attn_implementation, layout=cfg.layout)
    pair = resolve_hardware(hardware, pair, dtype=cfg.dtype, layout=cfg.layout, acceptance=acceptance,
                            progress=cli.progress_bar(), settings={"target": cfg.target, "draft": cfg.draft})
    profile, origin = resolve_batch_hardware(hardware, pair, sizes, progress=cli.progress_bar("measuring batches"),
                                             settings={"target": cfg.target, "draft": cfg.draft})
    print(f"batch sweep on {pair.hardware.device}: target {pair.hardware.target_dtype} {pair.hardware.target_layout}; "
          f"batch profile {origin}", flush=True)
    out_dir = cli.output_dir()
    plans = plan_rows(plan_batches(acceptance, profile, sizes)) if profile is not None and acceptance else []
    if plans:
        print("the tree planned per batch size:\n" + format_plan_rows(plans), flush=True)
        profile.to_yaml(out_dir / "batch_profile.yaml")
    choices = {(b, m): build_batch_policy(tree, acceptance_for(model, tree, sampling), profile, b, pair.hardware.name)
               for b in sizes for m, tree in trees.items()}
    ar_rate = {r["batch_size"]: r["predicted_autoregressive_tokens_per_second"] for r in plans}
    prompts = load_data(cli.to_spec(DataSpec, cfg.data), pair.tokenizer)
    tokenizer = pair.tokenizer
    eos, pad = tokenizer.eos_token_id, tokenizer.pad_token_id or tokenizer.eos_token_id or 0
    counter = PassCounter(pair.target)

    def decode(method: str, size: int, group: list[list[int]], seed: int, max_new: int):
        counter.calls = 0
        start = time.perf_counter()
        if method == "hf_generate":
            outputs, rows = hf_decode_batch(pair.target, group, sampling, max_new, eos, pad, seed)
            passes = counter.calls * rows
        else:
            outs = generate_batch(pair.target, pair.draft, group, tree=choices[size, method].policy, max_new_tokens=max_new,
                                  temperature=sampling.temperature, top_p=sampling.top_p, top_k=sampling.top_k,
                                  seed=seed, eos_token_id=eos)
            outputs, passes = [o.tokens for o in outs], sum(o.target_passes for o in outs)
        return outputs, time.perf_counter() - start, passes, counter.calls

    rows = []
    total = sum(len(methods) * -(-len(prompts) // b) for b in sizes)
    with open(out_dir / "batch_sweep_rows.jsonl", "w") as row_file, tqdm(total=total, desc="sweep", unit="batch") as bar:
        for size in sizes:
            groups = [[ids for _, ids in prompts[i: i + size]] for i in range(0, len(prompts), size)]
            for method in methods:  # warm-up at this batch size: first calls pay one-off costs
                decode(method, size, groups[0], cfg.seed, 4)
            for index, group in enumerate(groups):
                reference, done = None, []
                shift = index % len(methods)
                for method in methods[shift:] + methods[:shift]:
                    outputs, seconds, passes, calls = decode(method, size, group, cfg.seed + index * size,
                                                             cfg.max_new_tokens)
                    info = choices[size, method].info if method != "hf_generate" else {}
                    speedup = info.get("predicted_speedup")
                    done.append({"batch_size": size, "group": index, "rows": len(group), "method": method,
                                 "budget": info.get("budget"), "depth": info.get("depth"),
                                 "tokens": sum(len(o) for o in outputs), "seconds": seconds, "passes": passes,
                                 "batched_passes": calls, "predicted_accepted": info.get("predicted_accepted"),
                                 "predicted_speedup": speedup,
                                 "predicted_tokens_per_second": (ar_rate[size] * speedup if speedup and size in ar_rate
                                                                 else None),
                                 "output": outputs})
                    bar.update(1)
                if sampling.greedy:
                    reference = next((r["output"] for r in done if r["method"] == "hf_generate"),
                                     next(r["output"] for r in done if r["method"] == BASELINE))
                for row in done:
                    row["matches_reference"] = row["output"] == reference if reference is not None else None
                    row_file.write(json.dumps(row) + "\n")
                rows += done
    counter.handle.remove()
    table = sweep_table(rows)
    print(format_sweep(table))
    found = crossover(table, plans)
    print(f"crossover: plan chooses no tree from B = {found['predicted_no_tree_from']}, no tree measured faster than "
          f"autoregressive from B = {found['measured_no_tree_from']} (None: trees paid at every B tried)")
    for name, data in (("batch_sweep.csv", table), ("plans.csv", plans)):
        if data:
            with open(out_dir / name, "w", newline="") as handle:
                writer = csv.DictWriter(handle, fieldnames=list(data[0]))
                writer.writeheader()
                writer.writerows(data)
    settings = {"config": OmegaConf.to_container(cfg, resolve=True), "threads": torch.get_num_threads(),
                "hardware": {**pair.hardware.summary(), "batch_profile": origin}, "acceptance": acceptance,
                "policies": {f"{b}/{m}": c.info for (b, m), c in choices.items()}}
    result = {"table": table, "plans": plans, "crossover": found,
              "profile": profile.to_dict() if profile is not None else None, "settings": settings}
    (out_dir / "batch_sweep.json").write_text(json.dumps(result, indent=1, default=str))
    print(f"-> {out_dir}")
    return result


if __name__ == "__main__":
    torch.set_grad_enabled(False)
    cli.run_app(run, "batch_sweep", {"batch_sweep_schema": BatchSweepSchema})
