"""Where treespec stands: every method on the same prompts, in one process, interleaved (conf/bench.yaml).

    make bench                                              # default pair, 12 MT-Bench prompts, ~15 minutes
    python experiments/bench.py data.limit=80               # all 80 MT-Bench first turns
    python experiments/bench.py data=humaneval data.limit=null methods=[hf_generate,sequoia]

Methods: transformers `generate` with the target alone (hf_generate), transformers assisted generation
(hf_assisted, its default settings) with the pair's causal-LM draft (`model.assistant`, default the draft),
treespec autoregressive, chain, k-ary, Sequoia (the hardware-aware tree) and dynamic trees. `method_drafts`
gives a method another draft than the pair's (e.g. the assistant, for a same-draft comparison).
For each prompt and sampling mode every method runs once, in a rotating order. Target passes are counted
with a forward hook on the target, for every method alike.
Writes bench.csv (the table), bench_rows.jsonl (one row per prompt x sampling x method) and bench.json.

    python experiments/bench.py batch_size=4 methods=[hf_generate,autoregressive,sequoia]

batch_size=B > 1: the prompts are taken B at a time; treespec methods decode each group with
`treespec.generate_batch` (trees planned with B's costs, from a batch profile measured on demand), and
hf_generate decodes the same group as one left-padded batch (hf_assisted, one prompt at a time only, is left out).
A row is then one group: seconds its wall time, tokens all its rows' tokens, passes the target passes each
row took part in (so tokens/pass stays per sequence), batched_passes the target's forward calls.
"""

from __future__ import annotations

import csv
import json
import time
from dataclasses import dataclass, field
from typing import Any, Optional

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
    with_draft_weights,
)
from treespec.engine import generate
from treespec.errors import ConfigError
from treespec.hardware import body_dtype, configure
from treespec.reporting import bench_table, format_table
from treespec.sampling import SamplingConfig

HF_METHODS = ("hf_generate", "hf_assisted")


@dataclass
class BenchSchema:
    model: ModelSpec = field(default_factory=ModelSpec)
    data: DataSpec = field(default_factory=DataSpec)
    hardware: HardwareSpec = field(default_factory=HardwareSpec)
    methods: list[str] = field(default_factory=lambda: ["hf_generate", "hf_assisted", "autoregressive", "chain",
                                                        "kary", "sequoia", "dynamic"])
    trees: dict[str, TreeSpec] = field(default_factory=dict)  # treespec method name -> its tree
    method_drafts: dict[str, str] = field(default_factory=dict)  # treespec method name -> its draft, if not the pair's
    samplings: list[SamplingSpec] = field(default_factory=list)
    max_new_tokens: int = 128
    seed: int = 0
    device: str = "auto"
    dtype: str = "float32"  # or auto: fp32 or bf16 per model, by measurement (hardware=auto)
    layout: str = "auto"  # auto (measured) | standard | transposed | onednn | hybrid:<rows> | packed:<rows>
    threads: int = 0
    batch_size: int = 1  # > 1: prompts in groups of B, decoded as one batch by every method
    target: str = "${model.target}"
    draft: Optional[str] = "${model.draft}"


class PassCounter:
    """Counts forward calls of a model (one per target pass) through a forward pre-hook."""

    def __init__(self, model: torch.nn.Module):
        self.calls = 0
        self.handle = model.register_forward_pre_hook(self._hook)

    def _hook(self, *_):
        self.calls += 1


def hf_decode(target, assistant, ids: list[int], sampling: SamplingConfig, max_new_tokens: int, eos: int | None,
              pad: int, seed: int) -> list[int]:
    """transformers' generate (optionally assisted), with the same sampling settings as treespec."""
    torch.manual_seed(seed)
    options: dict[str, Any] = {"do_sample": False}
    if not sampling.greedy:
        options = {"do_sample": True, "temperature": sampling.temperature, "top_p": sampling.top_p,
                   "top_k": sampling.top_k}  # top_k=0 disables transformers' default of 50
    out = target.generate(input_ids=torch.tensor([ids], device=target.device),
                          attention_mask=torch.ones(1, len(ids), dtype=torch.long, device=target.device),
                          max_new_tokens=max_new_tokens, eos_token_id=eos, pad_token_id=pad,
                          assistant_model=assistant, **options)
    tokens = out[0, len(ids):].tolist()
    return tokens[: tokens.index(eos) + 1] if eos is not None and eos in tokens else tokens


def hf_decode_batch(target, batch: list[list[int]], sampling: SamplingConfig, max_new_tokens: int, eos: int | None,
                    pad: int, seed: int) -> tuple[list[list[int]], int]:
    """transformers' generate on prompts of any lengths as one left-padded batch; (each row's tokens up to and
    including its EOS, the batch's row count)."""
    torch.manual_seed(seed)
    options: dict[str, Any] = {"do_sample": False}
    if not sampling.greedy:
        options = {"do_sample": True, "temperature": sampling.temperature, "top_p": sampling.top_p, "top_k": sampling.top_k}
    width = max(len(ids) for ids in batch)
    input_ids = torch.full((len(batch), width), pad, dtype=torch.long)
    mask = torch.zeros(len(batch), width, dtype=torch.long)
    for b, ids in enumerate(batch):
        input_ids[b, width - len(ids):], mask[b, width - len(ids):] = torch.as_tensor(ids), 1
    out = target.generate(input_ids=input_ids.to(target.device), attention_mask=mask.to(target.device),
                          max_new_tokens=max_new_tokens, eos_token_id=eos, pad_token_id=pad, **options)
    rows = []
    for b in range(len(batch)):
        tokens = out[b, width:].tolist()
        rows.append(tokens[: tokens.index(eos) + 1] if eos is not None and eos in tokens else tokens)
    return rows, len(batch)


def write_outputs(out_dir, table: list[dict], settings: dict) -> None:
    """Print the table and write bench.csv and bench.json."""
    print(format_table(table))
    with open(out_dir / "bench.csv", "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(table[0]))
        writer.writeheader()
        writer.writerows(table)
    (out_dir / "bench.json").write_text(json.dumps({"table": table, "settings": settings}, indent=1))


def run(cfg: DictConfig) -> list[dict]:
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    model = cli.to_spec(ModelSpec, cfg.model)
    hardware = cli.to_spec(HardwareSpec, cfg.hardware)
    samplings = [cli.to_spec(SamplingSpec, s) for s in cfg.samplings]
    methods = list(cfg.methods)
    unknown = [m for m in methods if m not in HF_METHODS and m not in cfg.trees]
    if unknown:
        raise ConfigError(f"methods {unknown} are neither {HF_METHODS} nor keys of trees")
    if cfg.batch_size < 1:
        raise ConfigError(f"batch_size must be >= 1, got {cfg.batch_size}")
    if cfg.batch_size > 1 and "hf_assisted" in methods:
        methods.remove("hf_assisted")
        print(f"batch size {cfg.batch_size}: hf_assisted left out (transformers' assisted generation takes one prompt "
              "at a time)", flush=True)
        if not methods:
            raise ConfigError("batch_size > 1 leaves no method to run: hf_assisted takes one prompt at a time")
    for method in methods:
        if method not in HF_METHODS and cfg.batch_size == 1:
            check_hardware(cli.to_spec(TreeSpec, cfg.trees[method]), hardware)
    device = resolve_device(cfg.device)
    pair = load_pair(cfg.target, cfg.draft, device=device, dtype=cfg.dtype, attn_implementation=model.attn_implementation,
                     layout=cfg.layout)
    pair = with_draft_weights(pair, model.draft_weights)
    pair = with_draft_vocab(pair, model.draft_vocab)
    if pair.draft_vocab is not None and cfg.batch_size > 1:
        raise ConfigError("model.draft_vocab is for batch_size=1; the batch engine drafts the full vocabulary")
    pair = resolve_hardware(hardware, pair, dtype=cfg.dtype, layout=cfg.layout,
                            acceptance=acceptance_for(model, TreeSpec(), sampling_config(samplings[0])),
                            progress=cli.progress_bar(), settings={"target": cfg.target, "draft": cfg.draft})
    print(f"bench on {pair.hardware.device}: target {pair.hardware.target_dtype} {pair.hardware.target_layout}, "
          f"draft {pair.hardware.draft_dtype} {pair.hardware.draft_layout}; hardware profile {pair.hardware.origin}",
          flush=True)
    drafts = {cfg.draft: pair.draft}
    wanted = {cfg.method_drafts[m] for m in methods if m in cfg.method_drafts}
    if "hf_assisted" in methods:
        wanted.add(model.assistant or cfg.draft)
    # other drafts take the dtype (without a bf16 EAGLE output layer) and layout chosen for the pair's draft
    for name in wanted - set(drafts):
        other = load_pair(cfg.target, name, device=device, dtype="float32", attn_implementation=model.attn_implementation,
                          layout="standard").draft
        drafts[name] = configure(other, body_dtype(pair.hardware.draft_dtype or pair.hardware.target_dtype),
                                 pair.hardware.draft_layout or pair.hardware.target_layout)
    assistant = drafts.get(model.assistant or cfg.draft)
    prompts = load_data(cli.to_spec(DataSpec, cfg.data), pair.tokenizer)
    eos, pad = pair.tokenizer.eos_token_id, pair.tokenizer.pad_token_id or pair.tokenizer.eos_token_id
    size = int(cfg.batch_size)
    batch_profile, batch_origin = (resolve_batch_hardware(hardware, pair, (size,), progress=cli.progress_bar(),
                                                          settings={"target": cfg.target, "draft": cfg.draft})
                                   if size > 1 else (None, None))
    if size > 1:
        print(f"batch size {size}: batch profile {batch_origin}", flush=True)
    choices = {}
    for spec in samplings:
        sampling = sampling_config(spec)
        for method in methods:
            if method not in HF_METHODS:
                tree = cli.to_spec(TreeSpec, cfg.trees[method])
                if size > 1:
                    choices[spec.name, method] = build_batch_policy(tree, acceptance_for(model, tree, sampling),
                                                                    batch_profile, size, pair.hardware.name)
                else:
                    choices[spec.name, method] = build_policy(tree, acceptance_for(model, tree, sampling),
                                                              pair.hardware.profile, pair.hardware.name)
    counter = PassCounter(pair.target)
    if size > 1:
        return _run_batched(cfg, methods, samplings, prompts, choices, drafts, counter, pair, eos, pad, batch_origin)

    def decode(method: str, spec: SamplingSpec, ids: list[int], seed: int, max_new: int) -> tuple[list[int], float, int]:
        sampling = sampling_config(spec)
        counter.calls = 0
        start = time.perf_counter()
        if method in HF_METHODS:
            tokens = hf_decode(pair.target, assistant if method == "hf_assisted" else None, ids, sampling, max_new,
                               eos, pad, seed)
            passes = counter.calls
        else:
            name = cfg.method_drafts.get(method, cfg.draft)
            out = generate(pair.target, drafts[name], ids, tree=choices[spec.name, method].policy,
                           draft_vocab=pair.draft_vocab if name == cfg.draft else None,
                           max_new_tokens=max_new, temperature=sampling.temperature, top_p=sampling.top_p,
                           top_k=sampling.top_k, seed=seed, eos_token_id=eos)
            tokens, passes = out.tokens, out.target_passes
        return tokens, time.perf_counter() - start, passes

    for spec in samplings:  # warm-up: first calls pay one-off costs
        for method in methods:
            decode(method, spec, prompts[0][1], cfg.seed, 8)

    out_dir = cli.output_dir()
    rows = []
    # greedy outputs are checked against transformers' generate, or treespec's autoregressive loop without it
    reference_method = "hf_generate" if "hf_generate" in methods else "autoregressive"
    with open(out_dir / "bench_rows.jsonl", "w") as row_file, \
            tqdm(total=len(prompts) * len(samplings) * len(methods), desc="bench", unit="run") as bar:
        for index, (prompt, ids) in enumerate(prompts):
            for spec in samplings:
                shift = index % len(methods)
                reference = None
                for method in methods[shift:] + methods[:shift]:
                    tokens, seconds, passes = decode(method, spec, ids, cfg.seed + index, cfg.max_new_tokens)
                    if spec.temperature == 0 and method == reference_method:
                        reference = tokens
                    choice = choices.get((spec.name, method))
                    rows.append({"prompt_id": prompt.id, "category": prompt.category, "sampling": spec.name,
                                 "method": method, "tokens": len(tokens), "seconds": seconds, "passes": passes,
                                 "predicted_accepted": choice.info.get("predicted_accepted") if choice else None,
                                 "predicted_speedup": choice.info.get("predicted_speedup") if choice else None,
                                 "output": tokens})
                    bar.update(1)
                for row in rows[-len(methods):]:  # greedy: every method must reproduce transformers' output
                    row["matches_reference"] = None if reference is None else row["output"] == reference
                    row_file.write(json.dumps(row) + "\n")
    counter.handle.remove()
    table = bench_table(rows)
    settings = {"config": OmegaConf.to_container(cfg, resolve=True), "threads": torch.get_num_threads(),
                "assistant": model.assistant or cfg.draft, "hardware": pair.hardware.summary(),
                "policies": {f"{s}/{m}": c.info for (s, m), c in choices.items()}}
    write_outputs(out_dir, table, settings)
    print(f"-> {out_dir}")
    return table


def _run_batched(cfg, methods, samplings, prompts, choices, drafts, counter, pair, eos, pad, batch_origin) -> list[dict]:
    """run() at batch_size > 1: every method decodes each group of B prompts as one batch, in a rotating order."""
    size = int(cfg.batch_size)

    def decode(method: str, spec: SamplingSpec, group: list[list[int]], seed: int,
               max_new: int) -> tuple[list[list[int]], float, int, int]:
        sampling = sampling_config(spec)
        counter.calls = 0
        start = time.perf_counter()
        if method == "hf_generate":
            outputs, rows = hf_decode_batch(pair.target, group, sampling, max_new, eos, pad, seed)
            passes = counter.calls * rows
        else:
            outs = generate_batch(pair.target, drafts[cfg.method_drafts.get(method, cfg.draft)], group,
                                  tree=choices[spec.name, method].policy, max_new_tokens=max_new,
                                  temperature=sampling.temperature, top_p=sampling.top_p, top_k=sampling.top_k,
                                  seed=seed, eos_token_id=eos)
            outputs, passes = [o.tokens for o in outs], sum(o.target_passes for o in outs)
        return outputs, time.perf_counter() - start, passes, counter.calls

    groups = [prompts[i: i + size] for i in range(0, len(prompts), size)]
    for spec in samplings:  # warm-up: first calls pay one-off costs
        for method in methods:
            decode(method, spec, [ids for _, ids in groups[0]], cfg.seed, 8)
    out_dir = cli.output_dir()
    rows = []
    reference_method = "hf_generate" if "hf_generate" in methods else "autoregressive"
    with open(out_dir / "bench_rows.jsonl", "w") as row_file, \
            tqdm(total=len(groups) * len(samplings) * len(methods), desc=f"bench B={size}", unit="batch") as bar:
        for index, group in enumerate(groups):
            ids = [i for _, i in group]
            for spec in samplings:
                shift = index % len(methods)
                reference = None
                for method in methods[shift:] + methods[:shift]:
                    outputs, seconds, passes, calls = decode(method, spec, ids, cfg.seed + index * size,
                                                             cfg.max_new_tokens)
                    if spec.temperature == 0 and method == reference_method:
                        reference = outputs
                    choice = choices.get((spec.name, method))
                    rows.append({"prompt_id": "+".join(str(p.id) for p, _ in group), "category": "batch",
                                 "sampling": spec.name, "method": method, "batch_size": len(group),
                                 "tokens": sum(len(o) for o in outputs), "seconds": seconds, "passes": passes,
                                 "batched_passes": calls,
                                 "predicted_accepted": choice.info.get("predicted_accepted") if choice else None,
                                 "predicted_speedup": choice.info.get("predicted_speedup") if choice else None,
                                 "output": outputs})
                    bar.update(1)
                for row in rows[-len(methods):]:  # greedy: every row must reproduce the reference method's
                    row["matches_reference"] = None if reference is None else row["output"] == reference
                    row_file.write(json.dumps(row) + "\n")
    counter.handle.remove()
    table = bench_table(rows)
    for row in table:
        row["batch_size"] = size
    settings = {"config": OmegaConf.to_container(cfg, resolve=True), "threads": torch.get_num_threads(),
                "batch_size": size, "hardware": {**pair.hardware.summary(), "batch_profile": batch_origin},
                "policies": {f"{s}/{m}": c.info for (s, m), c in choices.items()}}
    write_outputs(out_dir, table, settings)
    print(f"-> {out_dir}")
    return table


if __name__ == "__main__":
    torch.set_grad_enabled(False)
    cli.run_app(run, "bench", {"bench_schema": BenchSchema})
