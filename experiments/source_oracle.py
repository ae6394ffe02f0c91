"""What a tree that mixes drafting sources could save at most (config: conf/source_oracle.yaml).

    python experiments/source_oracle.py                        # prompt lookup and the head, 5 edit-workload prompts
    python experiments/source_oracle.py data=mtbench data.limit=10 threads=2
    python experiments/source_oracle.py '+sources.tree={policy: sequoia, budget: 16}'   # a third source
    python experiments/source_oracle.py '~sources' '+sources={lookup: {policy: ngram}, line: {policy: chain, k: 8}}'

Greedy only. The target, configured as the bench runs it (`hardware=auto`), answers each prompt (`max_new_tokens`);
then each source (a tree spec, unpriced: without the profile's costs, so prompt lookup drafts its whole trie) takes
one step from every position of that answer, and the tokens each step adds are recorded
(treespec.eval.source_oracle). Writes source_oracle.yaml: per source and for the best source at each position,
target passes and tokens per pass, and `best_saves`, the best single source's passes over the mixture's: an upper
bound on how much faster (in passes) a hybrid tree of these sources can decode than the best of them alone, since it
grants the mixture the winning branch every step with no extra rows or drafting. One prefill per position and
source: minutes per prompt on the default pair.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
import yaml
from omegaconf import DictConfig, OmegaConf
from tqdm import tqdm

from treespec.api import autoregressive
from treespec.app import cli
from treespec.app.configs import DataSpec, HardwareSpec, ModelSpec, PairSpec, TreeSpec, load_data
from treespec.app.session import open_session
from treespec.decode.sampling import SamplingConfig
from treespec.errors import ConfigError
from treespec.eval.source_oracle import oracle_summary, step_lengths


@dataclass
class SourceOracleSchema(PairSpec):
    data: DataSpec = field(default_factory=DataSpec)
    hardware: HardwareSpec = field(default_factory=HardwareSpec)
    max_new_tokens: int = 128
    sources: dict[str, Any] = field(default_factory=dict)  # source name -> its tree (TreeSpec's keys, as conf/tree's)
    longest: int = 17


def run(cfg: DictConfig) -> dict:
    if not cfg.sources:
        raise ConfigError("source_oracle needs at least one source: sources={name: {policy: ...}}")
    if "best" in cfg.sources:
        raise ConfigError("'best' names the mixture of the sources in the report: give that source another name")
    if cfg.longest < 2:
        raise ConfigError(f"longest must be >= 2 (a step adds a draft and a bonus), got {cfg.longest}")
    trees = {name: cli.to_spec(TreeSpec, tree) for name, tree in cfg.sources.items()}
    model = cli.to_spec(ModelSpec, cfg.model)
    session = open_session(model, cli.runtime(cfg), cli.to_spec(HardwareSpec, cfg.hardware), target=cfg.target,
                           draft=cfg.draft, with_draft=bool(cfg.draft))
    greedy = SamplingConfig(temperature=0.0)
    policies = {name: session.policy(tree, greedy, priced=False).policy for name, tree in trees.items()}
    data = cli.to_spec(DataSpec, cfg.data)
    prompts = load_data(data, session.tokenizer)
    references = [autoregressive(session.target, ids, max_new_tokens=cfg.max_new_tokens).tokens
                  for _, ids in tqdm(prompts, desc="greedy answers", unit="prompt")]
    lengths: dict[str, list[list[int]]] = {name: [] for name in policies}
    with tqdm(total=len(policies) * sum(map(len, references)), desc="steps from every position", unit="step") as bar:
        for (_, ids), reference in zip(prompts, references):
            for name, policy in policies.items():
                lengths[name].append(step_lengths(session.target, session.draft, ids, reference, policy,
                                                  longest=cfg.longest, draft_vocab=session.draft_vocab,
                                                  progress=lambda: bar.update(1)))
    result = {"settings": {"model": model.name, "target": cfg.target, "draft": cfg.draft, "data": data.name,
                           "prompts": len(prompts), "max_new_tokens": cfg.max_new_tokens, "longest": cfg.longest,
                           "sources": OmegaConf.to_container(cfg.sources),
                           "layout": cfg.layout, "dtype": cfg.dtype,
                           "hardware": cfg.hardware.name},
              **oracle_summary(lengths),
              "step_lengths": lengths}
    path = cli.output_dir() / "source_oracle.yaml"
    path.write_text(yaml.safe_dump(result, sort_keys=False, default_flow_style=None, width=120))
    for name, n in result["passes"].items():
        print(f"{name:>12}: {n} passes, {result['tokens_per_pass'][name]} tokens per pass")
    print(f"the best source at every position needs {result['best_saves']}x fewer passes than the best single source "
          f"({result['best_single']}) -> {path}")
    return result


if __name__ == "__main__":
    torch.set_grad_enabled(False)
    cli.run_app(run, "source_oracle", {"source_oracle_schema": SourceOracleSchema})
