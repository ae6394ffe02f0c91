"""Typed configuration (the schema behind conf/) and the builders that turn it into engine objects.

The dataclasses are plain Python; entry points register them with Hydra's ConfigStore so that a typo in
a config file or an override is an error. Builders take the dataclasses, never Hydra objects.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

import numpy as np
import torch

from treespec.data import Prompt, encode_prompt, load_prompts
from treespec.errors import ConfigError, TreespecError
from treespec.latency import LatencyProfile
from treespec.models import check_pair, load_model, load_tokenizer, transpose_linear_storage
from treespec.optimizer import choose_tree_size, expected_tokens, sequoia_tree
from treespec.policies import CHILDREN_MODES, Dynamic, Static, TreePolicy
from treespec.sampling import SamplingConfig
from treespec.tree import TreeShape, chain, kary

POLICIES = ("autoregressive", "chain", "kary", "paths", "sequoia", "dynamic", "file")


@dataclass
class ModelSpec:
    """A target + draft pair and what was measured about it."""

    name: str = "smollm2"
    target: str = "smollm2-135m-instruct"
    draft: Optional[str] = "smollm2-135m-eagle"
    assistant: Optional[str] = None  # a causal-LM draft for transformers' assisted generation (default: draft)
    attn_implementation: str = "sdpa"
    acceptance_greedy: Optional[Any] = None  # measured P_k at temperature 0: a vector [K] or a depth x rank matrix
    acceptance_sampled: Optional[Any] = None  # the same under sampling
    acceptance_source: str = ""  # how the vectors were measured


@dataclass
class TreeSpec:
    policy: str = "sequoia"  # one of POLICIES
    k: int = 4  # chain: drafted tokens
    widths: list[int] = field(default_factory=lambda: [2, 2, 1])  # kary: children per level
    paths: list[list[int]] = field(default_factory=list)  # paths: 0-based rank paths
    budget: Optional[int] = None  # sequoia/dynamic: nodes incl. the root (sequoia: None = hardware-aware)
    max_depth: Optional[int] = None  # levels incl. the root (sequoia: None = hardware-aware)
    max_budget: int = 64  # search range of the hardware-aware choice
    topk: int = 4  # dynamic: expansion width
    children: str = "without_replacement"  # static trees under sampling: see treespec.policies
    acceptance: Optional[Any] = None  # overrides the model's measured vector (or depth x rank matrix)
    file: Optional[str] = None  # policy=file: a tree YAML written by experiments/build_tree.py


@dataclass
class SamplingSpec:
    name: str = "greedy"
    temperature: float = 0.0
    top_p: float = 1.0
    top_k: int = 0


@dataclass
class DataSpec:
    name: str = "mtbench"
    source: str = "mtbench"  # "mtbench", "humaneval" or a JSONL path
    limit: Optional[int] = None
    shuffle_seed: Optional[int] = None
    chat: Optional[bool] = None  # None: use the tokenizer's chat template when it has one


@dataclass
class HardwareSpec:
    """A measured latency profile (experiments/profile_latency.py writes these)."""

    name: str = "unmeasured"
    target_ms: dict[int, float] = field(default_factory=dict)
    draft_ms: float = 0.0
    settings: dict[str, Any] = field(default_factory=dict)


def sampling_config(spec: SamplingSpec) -> SamplingConfig:
    return SamplingConfig(spec.temperature, spec.top_p, spec.top_k)


def acceptance_for(model: ModelSpec, tree: TreeSpec, sampling: SamplingConfig) -> Optional[list]:
    """The acceptance that applies (a vector or a depth x rank matrix): the tree's override, else the model's
    for this sampling mode."""
    if tree.acceptance:
        return list(tree.acceptance)
    vector = model.acceptance_greedy if sampling.greedy else (model.acceptance_sampled or model.acceptance_greedy)
    return list(vector) if vector else None


def latency_profile(spec: HardwareSpec) -> Optional[LatencyProfile]:
    if not spec.target_ms:
        return None
    return LatencyProfile.from_dict({"target_ms": dict(spec.target_ms), "draft_ms": spec.draft_ms,
                                     "settings": dict(spec.settings)})


@dataclass(frozen=True)
class PolicyChoice:
    """A built policy and how it was chosen (for reports and summaries)."""

    policy: TreePolicy
    info: dict[str, Any]  # policy, budget, depth, acceptance, hardware, predicted tokens per pass / speedup


def build_policy(tree: TreeSpec, acceptance: Optional[list[float]], hardware: Optional[LatencyProfile],
                 hardware_name: str = "") -> PolicyChoice:
    """Turn a TreeSpec into a policy; Sequoia without budget/depth uses the hardware-aware choice."""
    if tree.policy not in POLICIES:
        raise ConfigError(f"tree.policy must be one of {POLICIES}, got '{tree.policy}'")
    if tree.children not in CHILDREN_MODES:
        raise ConfigError(f"tree.children must be one of {CHILDREN_MODES}, got '{tree.children}'")
    info: dict[str, Any] = {"policy": tree.policy}
    if tree.policy == "dynamic":
        if tree.budget is None or tree.max_depth is None:
            raise ConfigError("tree=dynamic needs tree.budget and tree.max_depth")
        info.update(budget=tree.budget, depth=tree.max_depth, topk=tree.topk)
        return PolicyChoice(Dynamic(tree.budget, tree.max_depth, tree.topk), info)
    if tree.policy == "sequoia":
        if acceptance is None:
            raise ConfigError("tree=sequoia needs an acceptance vector: set tree.acceptance=[...] or use a model "
                              "config with measured acceptance (experiments/measure_acceptance.py)")
        if tree.budget is None or tree.max_depth is None:
            if hardware is None:
                raise ConfigError("tree=sequoia without tree.budget and tree.max_depth needs a measured hardware "
                                  "profile (hardware=...) for the hardware-aware choice")
            choice = choose_tree_size(acceptance, hardware.relative_latency, hardware.draft_cost,
                                      max_budget=tree.budget or tree.max_budget,
                                      max_depth=tree.max_depth or min(16, tree.max_budget))
            shape = sequoia_tree(acceptance, choice.budget, choice.max_depth)
            info.update(hardware_aware=True, predicted_speedup=round(choice.predicted_speedup, 4))
        else:
            shape = sequoia_tree(acceptance, tree.budget, tree.max_depth)
    elif tree.policy == "file":
        if not tree.file:
            raise ConfigError("tree=file needs tree.file=<tree YAML>")
        shape = TreeShape.from_yaml(tree.file)
    elif tree.policy == "chain":
        shape = chain(tree.k)
    elif tree.policy == "kary":
        shape = kary(tree.widths)
    elif tree.policy == "paths":
        shape = TreeShape.from_paths(tree.paths, {"policy": "paths"})
    else:
        shape = chain(0)
    info.update(budget=shape.size, depth=shape.levels, children=tree.children)
    if acceptance is not None:
        info.update(acceptance=np.round(np.asarray(acceptance, dtype=float), 5).tolist(),
                    predicted_accepted=round(expected_tokens(shape, acceptance), 4))
    if hardware is not None:
        info.update(hardware=hardware_name, draft_cost=round(hardware.draft_cost, 4))
    return PolicyChoice(Static(shape, tree.children, name=tree.policy), info)


def resolve_device(device: str) -> torch.device:
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        resolved = torch.device(device)
    except RuntimeError as err:
        raise ConfigError(f"unknown device '{device}' ({err})") from err
    if resolved.type == "cuda" and not torch.cuda.is_available():
        raise ConfigError(f"device '{device}' asked for, but CUDA is not available here; use device=cpu or auto")
    return resolved


def check_tokenizers(target_name: str, draft_name: str, target_tokenizer) -> None:
    """Fail when the draft ships a tokenizer that differs from the target's."""
    try:
        draft_tokenizer = load_tokenizer(draft_name)
    except (OSError, TreespecError):
        return  # a draft directory without its own tokenizer: the vocabulary-size check still applies
    if draft_tokenizer.get_vocab() != target_tokenizer.get_vocab():
        raise ConfigError(f"the draft's tokenizer ({draft_name}) differs from the target's ({target_name}); "
                          "treespec needs a draft that shares the target's tokenizer")


@dataclass(frozen=True)
class LoadedPair:
    target: Any
    draft: Any  # None when no draft was asked for
    tokenizer: Any


def load_pair(target: str, draft: Optional[str], *, device: torch.device, dtype: str = "float32",
              attn_implementation: str = "sdpa", fast_cpu_layout: bool = True) -> LoadedPair:
    """Target, optional draft and the target's tokenizer, checked to fit together.

    On a CPU, `fast_cpu_layout` stores linear weights transposed (`models.transpose_linear_storage`): measured
    on the default target, 10-16% faster passes for 4-32 tokens and 3% for 1 token, same values up to rounding.
    """
    tokenizer = load_tokenizer(target)
    target_model = load_model(target, dtype=dtype, device=device, attn_implementation=attn_implementation)
    draft_model = None
    if draft:
        check_tokenizers(target, draft, tokenizer)
        draft_model = load_model(draft, dtype=dtype, device=device, attn_implementation=attn_implementation)
        check_pair(target_model, draft_model)
    if fast_cpu_layout and device.type == "cpu":
        for model in (target_model, draft_model):
            if model is not None:
                transpose_linear_storage(model)
    return LoadedPair(target_model, draft_model, tokenizer)


def load_data(spec: DataSpec, tokenizer) -> list[tuple[Prompt, list[int]]]:
    """The prompt set of a DataSpec, each prompt with its token ids (chat template applied as configured)."""
    prompts = load_prompts(spec.source, limit=spec.limit, shuffle_seed=spec.shuffle_seed)
    return [(p, encode_prompt(tokenizer, p.text, chat=spec.chat)) for p in prompts]
