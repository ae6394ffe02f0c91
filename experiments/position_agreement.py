"""Where a draft agrees with the target's greedy text: at every position, and where decoding passes start
(config: conf/position_agreement.yaml; treespec.training.position_agreement says why the two differ).

    python experiments/position_agreement.py data=mtbench threads=2
    python experiments/position_agreement.py data=self model.draft=outputs/train_draft/<run>/draft

Greedy only: each prompt is decoded by the target alone, then teacher-forced through the target and the draft
(EAGLE heads: their unrolled levels). Writes position_agreement.yaml into the run directory: agreement by depth
over every generated position (what a training run's held-out agreement estimates), depth-1 agreement at the
positions where the passes of a spine-tree decode start and elsewhere, the share of generated tokens in the
draft's vocabulary, and the replayed decode's P_1 by depth (what `measure_acceptance width=W depth=D` reports);
`by_category` repeats these per prompt category (MT-Bench's eight; the pool's) when the set has more than one.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

import torch
import yaml
from omegaconf import DictConfig
from tqdm import tqdm

from treespec.api import autoregressive
from treespec.app import cli
from treespec.app.configs import DataSpec, HardwareSpec, ModelSpec, PairSpec, load_data
from treespec.app.session import open_session
from treespec.errors import ConfigError
from treespec.training.position_agreement import PositionAgreement, position_agreement, teacher_forced_proposals


@dataclass
class PositionAgreementSchema(PairSpec):
    data: DataSpec = field(default_factory=DataSpec)
    width: int = 8
    depth: int = 3
    max_new_tokens: int = 128
    draft_dtype: Optional[str] = None  # the draft's precision if not `dtype`, e.g. float32+bfloat16_head


def run(cfg: DictConfig) -> dict:
    if not cfg.draft:
        raise ConfigError("position_agreement needs a draft (model.draft)")
    if cfg.width < 1 or cfg.depth < 1:
        raise ConfigError(f"width and depth must be >= 1, got {cfg.width} and {cfg.depth}")
    model = cli.to_spec(ModelSpec, cfg.model)
    pair = open_session(model, cli.runtime(cfg), HardwareSpec(name="none"), target=cfg.target, draft=cfg.draft,
                        tune=False, draft_precision=cfg.draft_dtype).pair
    data = cli.to_spec(DataSpec, cfg.data)
    prompts = load_data(data, pair.tokenizer)
    vocabulary = getattr(pair.draft.config, "output_token_ids", None) or None
    total = PositionAgreement.empty(cfg.depth, cfg.width)
    by_category: dict[str, PositionAgreement] = {}
    with tqdm(total=len(prompts), desc="position agreement", unit="prompt") as bar:
        for prompt, ids in prompts:
            generated = autoregressive(pair.target, ids, max_new_tokens=cfg.max_new_tokens).tokens
            tokens = torch.tensor(list(ids) + generated)
            proposals = teacher_forced_proposals(pair.target, pair.draft, tokens, cfg.depth, cfg.width)
            counts = position_agreement(proposals, tokens, len(ids) - 1, len(generated), cfg.max_new_tokens, vocabulary)
            total = total + counts
            category = prompt.category or "none"
            by_category[category] = by_category.get(category, PositionAgreement.empty(cfg.depth, cfg.width)) + counts
            bar.update(1)
    result = {"settings": {"model": model.name, "target": cfg.target, "draft": cfg.draft, "data": data.name,
                           "prompts": len(prompts), "width": cfg.width, "depth": cfg.depth,
                           "max_new_tokens": cfg.max_new_tokens, "dtype": cfg.dtype, "layout": cfg.layout,
                           "draft_dtype": cfg.draft_dtype},
              **total.summary(),
              **({"by_category": {c: a.summary() for c, a in by_category.items()}} if len(by_category) > 1 else {})}
    path = cli.output_dir() / "position_agreement.yaml"
    path.write_text(yaml.safe_dump(result, sort_keys=False))
    print(f"teacher-forced agreement by depth (every position): {result['agreement_by_depth']}")
    print(f"depth 1 where passes start: {result['agreement_at_pass_starts']} ({result['pass_starts']} passes), "
          f"elsewhere: {result['agreement_elsewhere']} ({result['positions_elsewhere']} positions)")
    print(f"generated tokens in the draft's vocabulary: {result['in_draft_vocabulary']}")
    print(f"replayed spine decode (width {cfg.width}, depth {cfg.depth}): P_1 by depth {result['walk_p1_by_depth']}, "
          f"{result['walk_tokens_per_pass']} tokens per pass -> {path}")
    for category, summary in result.get("by_category", {}).items():
        print(f"  {category:>15}: every position {summary['agreement_by_depth']}, depth 1 where passes start "
              f"{summary['agreement_at_pass_starts']}, in the draft's vocabulary {summary['in_draft_vocabulary']}, "
              f"P_1 by depth {summary['walk_p1_by_depth']}")
    return result


if __name__ == "__main__":
    torch.set_grad_enabled(False)
    cli.run_app(run, "position_agreement", {"position_agreement_schema": PositionAgreementSchema})
