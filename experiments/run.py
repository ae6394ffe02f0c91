"""Decode a prompt set with one configuration (config: conf/run.yaml).

    python experiments/run.py                                   # default pair, Sequoia, MT-Bench, greedy
    python experiments/run.py tree=dynamic sampling=t0.7 data.limit=20
    python experiments/run.py experiment=humaneval_chain
    python experiments/run.py -m tree.budget=4,8,16,32 tree.max_depth=3,5,7     # a sweep, one dir per job
    python experiments/run.py -m tree.budget=4,8,16,32                            # the planner picks each depth
    python experiments/run.py batch_size=4          # prompts decoded 4 at a time (generate_batch), tree planned for B=4

Writes into the Hydra run directory: metrics.jsonl (one row per target pass, one per prompt), summary.json
(tokens_per_second, new_tokens, target_passes, mean_accepted, predicted_accepted, phase timings, policy with the
values given and chosen, and the hardware profile: device, dtype, layout and where the profile came from).
Prompts are decoded batch_size at a time by `treespec.generate_batch` (prompt i draws from seed + i whatever the
batch size); with batch_size=B > 1 the tree is planned with B's costs (hardware=auto measures them on demand and
caches them), and summary.json's seconds / tokens_per_second are wall time over all batches (rows of a batch
overlap in time); mean_accepted stays tokens per pass per row, and batched_passes counts the target's batched
passes.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field

import torch
from omegaconf import DictConfig, OmegaConf
from tqdm import tqdm

from treespec.api import generate_batch
from treespec.app import cli
from treespec.app.configs import (
    DataSpec,
    DecodeSpec,
    HardwareSpec,
    ModelSpec,
    SamplingSpec,
    TreeSpec,
    check_hardware,
    load_data,
    needs_draft_model,
    sampling_config,
)
from treespec.app.session import open_session
from treespec.errors import ConfigError
from treespec.eval.reporting import pass_rows, prompt_row, summarise


@dataclass
class RunSchema(DecodeSpec):
    data: DataSpec = field(default_factory=DataSpec)
    name: str = "default"  # experiment name: the output directory's middle part
    max_new_tokens: int = 128
    batch_size: int = 1  # > 1: decode the prompts B at a time with treespec.generate_batch


def run(cfg: DictConfig) -> dict:
    tree, hardware = cli.to_spec(TreeSpec, cfg.tree), cli.to_spec(HardwareSpec, cfg.hardware)
    sampling = sampling_config(cli.to_spec(SamplingSpec, cfg.sampling))
    size = int(cfg.batch_size)
    if size < 1:
        raise ConfigError(f"batch_size must be >= 1, got {size}")
    if size == 1:  # at B > 1 the profile is checked where it is resolved
        check_hardware(tree, hardware)
    session = open_session(cli.to_spec(ModelSpec, cfg.model), cli.runtime(cfg), hardware, target=cfg.target,
                           draft=cfg.draft, with_draft=needs_draft_model(tree), sampling=sampling,
                           progress=cli.progress_bar())
    choice = session.policy(tree, sampling, size)
    info = choice.info
    print(f"{cfg.name}: " + (f"batch size {size}, " if size > 1 else "") + f"tree {info['policy']}, budget "
          f"{info.get('budget')}, depth {info.get('depth')}; {session.describe()}"
          + (f"; batch profile {session.profile(size)[1]}" if size > 1 else ""), flush=True)
    prompts = load_data(cli.to_spec(DataSpec, cfg.data), session.tokenizer)
    out_dir = cli.output_dir()
    generations, wall, batched_passes = [], 0.0, 0
    groups = [list(range(i, min(i + size, len(prompts)))) for i in range(0, len(prompts), size)]
    with open(out_dir / "metrics.jsonl", "w") as metrics, tqdm(total=len(prompts), desc=cfg.name, unit="prompt") as bar:
        for number, group in enumerate(groups):
            start = time.perf_counter()
            outs = generate_batch(session.target, session.draft, [prompts[i][1] for i in group], tree=choice.policy,
                                  draft_vocab=session.draft_vocab, max_new_tokens=cfg.max_new_tokens,
                                  temperature=sampling.temperature, top_p=sampling.top_p, top_k=sampling.top_k,
                                  seed=[cfg.seed + i for i in group])
            seconds = time.perf_counter() - start
            wall, batched_passes = wall + seconds, batched_passes + max(g.target_passes for g in outs)
            for index, generation in zip(group, outs):
                generations.append(generation)
                meta = {"prompt_id": prompts[index][0].id, "category": prompts[index][0].category}
                if size > 1:
                    meta["batch"] = number
                for row in pass_rows(generation, meta) + [prompt_row(generation, meta)]:
                    metrics.write(json.dumps(row) + "\n")
            bar.update(len(group))
            bar.set_postfix(tok_s=f"{sum(len(g.tokens) for g in outs) / seconds:.1f}",
                            per_pass=f"{sum(g.mean_accepted for g in outs) / len(outs):.2f}")
    summary = summarise(generations, info)
    summary["hardware"] = session.summary()
    if size > 1:
        summary.update(seconds=wall, tokens_per_second=summary["new_tokens"] / wall if wall else float("nan"),
                       batch_size=size, batches=len(groups), batched_passes=batched_passes,
                       row_seconds=sum(g.seconds for g in generations))
        summary["hardware"]["batch_profile"] = session.profile(size)[1]
    summary["config"] = OmegaConf.to_container(cfg, resolve=True)
    (out_dir / "summary.json").write_text(json.dumps(summary, indent=1))
    print(f"{cfg.name}: {summary['tokens_per_second']:.2f} tokens/s" + (f" at batch size {size}" if size > 1 else "")
          + f", {summary['mean_accepted']:.3f} tokens/pass" + (" per row" if size > 1 else "")
          + (f" (predicted {summary['predicted_accepted']:.3f})" if summary["predicted_accepted"] else "")
          + f" -> {out_dir}")
    return summary


if __name__ == "__main__":
    torch.set_grad_enabled(False)
    cli.run_app(run, "run", {"run_schema": RunSchema})
