"""Typed configuration (the schema behind conf/) and the builders that turn it into engine objects.

The dataclasses are plain Python; entry points register them with Hydra's ConfigStore so that a typo in a config
file or an override is an error. Builders take the dataclasses, never Hydra objects. Every app schema derives
from `RuntimeSpec` (device, dtype, layout, threads, seed: the `runtime` config group), so these five are declared
once and read the same way everywhere.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Optional

import numpy as np
import torch

from treespec.decode.sampling import SamplingConfig
from treespec.decode.tree import TreeShape, chain, kary
from treespec.drafters.policies import CHILDREN_MODES, Adaptive, Dynamic, Static
from treespec.drafters.sources import Hybrid, Lookahead, NGram
from treespec.errors import ConfigError, TreespecError
from treespec.eval.data import Prompt, encode_prompt, load_prompts
from treespec.models.layouts import set_linear_layout
from treespec.models.loading import check_pair, load_model, load_tokenizer
from treespec.plan.costs import LatencyProfile
from treespec.plan.hardware import Progress, ResolvedHardware, auto_profile, batch_profile, named_profile
from treespec.plan.optimizer import expected_tokens, sequoia_tree
from treespec.plan.planner import plan_tree

POLICIES = ("autoregressive", "chain", "kary", "paths", "sequoia", "dynamic", "adaptive", "file", "ngram", "lookahead",
            "hybrid")


@dataclass
class RuntimeSpec:
    """Where and how the models run (conf/runtime/): shared by every app schema."""

    device: str = "auto"  # auto | cpu | cuda | cuda:N
    dtype: str = "float32"  # float32 | bfloat16 | float16 | auto (fp32 or bf16 per model, measured)
    layout: str = "auto"  # auto (measured) | standard | transposed | onednn | hybrid:<rows> | packed:<rows>
    threads: int = 0  # torch intra-op threads; 0 = torch's default
    seed: int = 0


@dataclass
class ModelSpec:
    """A target + draft pair and what was measured about it."""

    name: str = "smollm2"
    target: str = "smollm2-135m-instruct"
    draft: Optional[str] = "smollm2-135m-eagle"
    assistant: Optional[str] = None  # a causal-LM draft for transformers' assisted generation (default: draft)
    attn_implementation: str = "treespec_sdpa"
    acceptance_greedy: Optional[Any] = None  # measured P_k at temperature 0: a vector [K] or a depth x rank matrix
    acceptance_sampled: Optional[Any] = None  # the same under sampling
    acceptance_source: str = ""  # how the vectors were measured
    # the same measured with the draft in another precision ({"int4": {"greedy": ..., "sampled": ..., "source": ...}}):
    # used where hardware=auto chose that precision for the draft
    acceptance_by_draft_precision: dict[str, Any] = field(default_factory=dict)
    draft_vocab: Optional[int] = None  # a causal-LM draft proposes from the N most frequent tokens
    draft_weights: Optional[str] = None  # "int4": a causal-LM draft's linear weights in 4 bits (models.quantize)
    target_weights: Optional[str] = "auto"  # "int4": the target's 4-bit-grid layers (a Q4 GGUF's) held as 4-bit codes;
    # "int4-a8": so, their products on int8 activations (models.quantize.set_activations); "auto": int4 where
    # hardware=auto measures that faster; null: as loaded


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
    threshold: float = 0.4  # adaptive: keep drafting while the chain's draft probability stays >= this
    width: int = 1  # adaptive: children of the root and of each chain node
    stop: str = "path"  # adaptive: threshold on the chain's draft probability ("path") or each new token's ("token")
    children: str = "without_replacement"  # static trees under sampling: see treespec.drafters.policies
    acceptance: Optional[Any] = None  # overrides the model's measured vector (or depth x rank matrix)
    file: Optional[str] = None  # policy=file: a tree YAML written by experiments/build_tree.py
    ngram_budget: int = 12  # ngram / hybrid: nodes of the prompt-lookup trie (hybrid: added to the model's tree)
    ngram_depth: int = 10  # ngram / hybrid: levels of the prompt-lookup trie, root included
    max_ngram: int = 4  # ngram / hybrid: the longest suffix looked up
    window: Optional[int] = None  # lookahead: Jacobi guesses per step (None: 4); hybrid: a lookahead pool too (None: none)
    ngram_size: int = 4  # lookahead (and hybrid with a window): N of the pool's n-grams
    prompt_lookup: bool = False  # lookahead: search the row's own text too (hybrid always does)
    model_policy: str = "dynamic"  # hybrid: the model's part, "dynamic" (budget, max_depth, topk) or "sequoia" (planned)


@dataclass
class SamplingSpec:
    name: str = "greedy"
    temperature: float = 0.0
    top_p: float = 1.0
    top_k: int = 0


@dataclass
class DataSpec:
    name: str = "mtbench"
    source: str = "mtbench"  # "mtbench", "humaneval", "pool", "self" or a JSONL path
    limit: Optional[int] = None
    skip: int = 0  # leave out the first `skip` prompts (after shuffling), e.g. those acceptance was measured on
    shuffle_seed: Optional[int] = None
    chat: Optional[bool] = None  # None: use the tokenizer's chat template when it has one


@dataclass
class HardwareSpec:
    """Where the planner's costs come from: `auto` (measured on this machine on first use, then cached; see
    treespec.plan.hardware), a named profile (experiments/profile_latency.py writes these), or `none`. The
    measured fields are a `LatencyProfile`'s (by batch size, or one sequence's as older files hold them)."""

    name: str = "auto"
    target_ms: dict[int, Any] = field(default_factory=dict)
    draft_ms: Any = None
    draft_width_ms: dict[int, Any] = field(default_factory=dict)
    overhead_ms: Any = None
    baseline_overhead_ms: Any = None
    settings: dict[str, Any] = field(default_factory=dict)
    remeasure: bool = False  # auto: measure again even when a cached profile matches
    repeats: int = 5  # auto: timed rounds per configuration
    prefix_len: int = 400  # auto: tokens in the KV cache under the timed passes
    batch_profile: Optional[str] = None  # batch_size > 1: a LatencyProfile YAML with it (auto: measured on demand)


@dataclass
class PairSpec(RuntimeSpec):
    """The runtime and a pair (conf/model/): the base of every app schema that loads models. `target` and `draft`
    are the command line's short names for `model.target` and `model.draft`."""

    model: ModelSpec = field(default_factory=ModelSpec)
    target: str = "${model.target}"
    draft: Optional[str] = "${model.draft}"


@dataclass
class DecodeSpec(PairSpec):
    """A pair decoding with one tree under one sampling mode, planned with a hardware profile: the demo's and
    experiments/run.py's schema base."""

    tree: TreeSpec = field(default_factory=TreeSpec)
    sampling: SamplingSpec = field(default_factory=SamplingSpec)
    hardware: HardwareSpec = field(default_factory=HardwareSpec)


def sampling_config(spec: SamplingSpec) -> SamplingConfig:
    return SamplingConfig(spec.temperature, spec.top_p, spec.top_k)


def acceptance_for(model: ModelSpec, tree: TreeSpec, sampling: SamplingConfig,
                   draft_precision: Optional[str] = None) -> Optional[list]:
    """The acceptance that applies (a vector or a depth x rank matrix): the tree's override, else the model's
    for this sampling mode, measured with the draft in `draft_precision` where the model spec has that."""
    if tree.acceptance:
        return list(tree.acceptance)
    measured = model.acceptance_by_draft_precision.get(draft_precision) if draft_precision else None
    greedy, sampled = (measured.get("greedy"), measured.get("sampled")) if measured else \
        (model.acceptance_greedy, model.acceptance_sampled)
    vector = greedy if sampling.greedy else (sampled or greedy)
    return list(vector) if vector else None


def latency_profile(spec: HardwareSpec) -> Optional[LatencyProfile]:
    """The profile a named HardwareSpec holds (None for `auto`, which is measured, and `none`)."""
    if not spec.target_ms:
        return None
    fields = {"target_ms": dict(spec.target_ms), "settings": dict(spec.settings)}
    for name in ("draft_ms", "draft_width_ms", "overhead_ms", "baseline_overhead_ms"):
        value = getattr(spec, name)
        if value is not None and value != {}:
            fields[name] = dict(value) if isinstance(value, dict) else value
    return LatencyProfile.from_dict(fields)


def needs_draft_model(tree: TreeSpec) -> bool:
    """Whether a tree drafts from the draft model (autoregressive decoding and prompt lookup need none)."""
    return tree.policy not in ("autoregressive", "ngram", "lookahead")


def needs_hardware(tree: TreeSpec) -> bool:
    """Whether building this tree needs a latency profile (a Sequoia tree with budget or depth left open, or a hybrid
    tree whose model part is one)."""
    planned = tree.policy == "sequoia" or (tree.policy == "hybrid" and tree.model_policy == "sequoia")
    return planned and (tree.budget is None or tree.max_depth is None)


def check_hardware(tree: TreeSpec, spec: HardwareSpec) -> None:
    """Fail before any model is loaded when the tree needs a profile and none will be there."""
    if needs_hardware(tree) and spec.name != "auto" and latency_profile(spec) is None and not spec.batch_profile:
        raise ConfigError(f"tree={tree.policy} planned without tree.budget and tree.max_depth needs a measured "
                          "hardware profile (hardware=auto, the default, or hardware=<name>)"
                          + ("; or tree.model_policy=dynamic with tree.budget and tree.max_depth"
                             if tree.policy == "hybrid" else ""))


@dataclass(frozen=True)
class PolicyChoice:
    """A built policy and how it was chosen (for reports and summaries)."""

    policy: Any  # a TreePolicy (treespec.drafters.policies)
    info: dict[str, Any]  # policy, budget, depth, acceptance, hardware, predicted tokens per pass / speedup


def build_policy(tree: TreeSpec, acceptance: Optional[list[float]], hardware: Optional[LatencyProfile],
                 hardware_name: str = "", batch_size: int = 1) -> PolicyChoice:
    """Turn a TreeSpec into a policy for B = `batch_size` rows. A Sequoia tree keeps the budget and depth limit the
    user set and leaves the rest to the hardware-aware planner (treespec.plan.planner.plan_tree, with the profile's
    costs at B, searching no further than the tree sizes measured at B); `info` says which values were given and
    which chosen, and, with a profile, the predicted tokens per pass and speedup."""
    if tree.policy not in POLICIES:
        raise ConfigError(f"tree.policy must be one of {POLICIES}, got '{tree.policy}'")
    if tree.children not in CHILDREN_MODES:
        raise ConfigError(f"tree.children must be one of {CHILDREN_MODES}, got '{tree.children}'")
    info: dict[str, Any] = {"policy": tree.policy, "batch_size": int(batch_size)}
    costs = hardware.step_costs(batch_size) if hardware is not None else None
    if costs is not None:
        info.update(hardware=hardware_name, draft_cost=round(hardware.draft_cost(batch_size), 4))
    if tree.policy == "dynamic":
        if tree.budget is None or tree.max_depth is None:
            raise ConfigError("tree=dynamic needs tree.budget and tree.max_depth")
        info.update(budget=tree.budget, depth=tree.max_depth, topk=tree.topk)
        return PolicyChoice(Dynamic(tree.budget, tree.max_depth, tree.topk), info)
    if tree.policy == "ngram":
        policy = NGram(tree.ngram_budget, tree.ngram_depth, tree.max_ngram, costs=costs)
        info.update(policy.describe())
        return PolicyChoice(policy, info)
    if tree.policy == "lookahead":
        policy = Lookahead(tree.ngram_budget, tree.ngram_depth, 4 if tree.window is None else tree.window, tree.ngram_size,
                           prompt_lookup=tree.prompt_lookup, max_ngram=tree.max_ngram, costs=costs)
        info.update(policy.describe())
        return PolicyChoice(policy, info)
    if tree.policy == "hybrid":
        model_alone, model_prior = None, 1.0
        if tree.model_policy == "sequoia":  # the static tree planned for the model alone, drafted as its top-k
            planned = build_policy(replace(tree, policy="sequoia"), acceptance, hardware, hardware_name, batch_size)
            model = Static(planned.policy.shape, "deterministic", name="sequoia")
            model_alone = planned.policy  # under sampling, where lookup adds nothing: the tree verified by its own rule
            model_prior = planned.info["predicted_accepted"] - 1  # its nodes accepted per step, before any is measured
            info.update(model_tree={k: planned.info[k] for k in ("budget", "depth", "chosen", "given") if k in planned.info})
        elif tree.model_policy == "dynamic":
            if tree.budget is None or tree.max_depth is None:
                raise ConfigError("tree=hybrid needs tree.budget and tree.max_depth (its model part: a dynamic tree)")
            model = Dynamic(tree.budget, tree.max_depth, tree.topk)
            info.update(topk=tree.topk)
        else:
            raise ConfigError(f"tree.model_policy must be dynamic or sequoia, got '{tree.model_policy}'")
        policy = Hybrid(model, tree.ngram_budget, tree.ngram_depth, tree.max_ngram, window=tree.window or 0,
                        ngram_size=tree.ngram_size, costs=costs, model_alone=model_alone, model_prior=model_prior)
        info.update({k: v for k, v in policy.describe().items() if k != "model_policy"})
        return PolicyChoice(policy, info)
    if tree.policy == "adaptive":
        if tree.max_depth is None:
            raise ConfigError("tree=adaptive needs tree.max_depth (levels incl. the root)")
        policy = Adaptive(tree.max_depth, tree.threshold, tree.width, tree.children, tree.stop)
        info.update(policy.describe())
        return PolicyChoice(policy, info)
    if tree.policy == "sequoia":
        if acceptance is None:
            raise ConfigError("tree=sequoia needs an acceptance vector: set tree.acceptance=[...] or use a model "
                              "config with measured acceptance (experiments/measure_acceptance.py)")
        if needs_hardware(tree):
            if costs is None:
                raise ConfigError(f"tree=sequoia without tree.budget and tree.max_depth needs a measured hardware "
                                  f"profile at batch size {batch_size} (hardware=auto, the default, or "
                                  "hardware=<name>; for a batch also hardware.batch_profile=<file>)")
            max_budget = min(tree.max_budget, costs.max_size)
            plan = plan_tree(acceptance, costs, budget=tree.budget, max_depth=tree.max_depth, max_budget=max_budget,
                             max_depth_limit=min(12, max_budget))
            shape = plan.tree
            info.update(hardware_aware=True, given=plan.describe()["given"], chosen=plan.describe()["chosen"])
        else:
            shape = sequoia_tree(acceptance, tree.budget, tree.max_depth)
            info.update(given={"budget": tree.budget, "max_depth": tree.max_depth}, chosen=[])
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
                    predicted_accepted=round(expected_tokens(shape, acceptance), 4) if shape.size > 1 else 1.0)
    if costs is not None and (acceptance is not None or shape.size == 1):
        info.update(predicted_speedup=round(costs.speedup(shape, acceptance if acceptance is not None else [0.0]), 4))
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
    except (OSError, ValueError, TreespecError):  # ValueError: transformers found a config but no tokenizer files
        return  # a draft directory without its own tokenizer (Medusa heads): the vocabulary-size check still applies
    if draft_tokenizer.get_vocab() != target_tokenizer.get_vocab():
        raise ConfigError(f"the draft's tokenizer ({draft_name}) differs from the target's ({target_name}); "
                          "treespec needs a draft that shares the target's tokenizer")


@dataclass(frozen=True)
class LoadedPair:
    target: Any
    draft: Any  # None when no draft was asked for
    tokenizer: Any
    hardware: Optional[ResolvedHardware] = None  # set by `resolve_hardware`
    draft_vocab: Optional[torch.Tensor] = None  # [S] token ids the draft proposes from; set by `with_draft_vocab`
    names: tuple[Optional[str], Optional[str]] = (None, None)  # target and draft as `load_pair` resolved them

    @property
    def costs(self):
        """The measured `StepCosts` at batch size 1 (for `plan_tree`, `policies.Hybrid(costs=...)`), or None without
        a profile."""
        profile = self.hardware.profile if self.hardware is not None else None
        return profile.step_costs(1) if profile is not None else None

    def encode(self, text: str, chat: Optional[bool] = None) -> list[int]:
        """A prompt's token ids, in the tokenizer's chat template when it has one (chat=None) or when chat=True."""
        if self.tokenizer is None:
            raise ConfigError("this pair has no tokenizer")
        return encode_prompt(self.tokenizer, text, chat=chat)


def with_draft_vocab(pair: LoadedPair, size: Optional[int]) -> LoadedPair:
    """The pair with its draft restricted to the `size` most frequent tokens (treespec.eval.draft_vocab); None: as
    is."""
    if size is None:
        return pair
    if pair.draft is None or pair.tokenizer is None:
        raise ConfigError("model.draft_vocab needs a draft model and the target's tokenizer")
    from treespec.eval.draft_vocab import draft_vocabulary

    vocab_size = pair.draft.get_output_embeddings().out_features
    return replace(pair, draft_vocab=draft_vocabulary(pair.tokenizer, vocab_size, int(size)))


def with_draft_weights(pair: LoadedPair, scheme: Optional[str]) -> LoadedPair:
    """The pair with its draft's linear weights in `scheme` ("int4", treespec.models.quantize; in place); None: as
    is."""
    if scheme is None:
        return pair
    if pair.draft is None:
        raise ConfigError("model.draft_weights needs a draft model")
    from treespec.models.eagle_head import EagleDraftModel
    from treespec.models.quantize import quantize_draft_weights

    if isinstance(pair.draft, EagleDraftModel):
        raise ConfigError("model.draft_weights is for a causal-LM draft; an EAGLE head's 4-bit form is a precision "
                          "hardware=auto measures and chooses (treespec.models.precision.INT4_DRAFT)")
    return replace(pair, draft=quantize_draft_weights(pair.draft, scheme))


LAYER_SKIP = "layerskip"  # the draft name of self-speculation: the target with some of its layers skipped
CALIBRATION = {"pool_prompts": 4, "pool_seed": 1, "new_tokens": 96}  # the target's own answers the search reads


def layer_skip_calibration(pair: LoadedPair, pool_prompts: int, pool_seed: int,
                           new_tokens: int) -> tuple[list[list[int]], list[int]]:
    """(prompt + the target's greedy answer, for `pool_prompts` prompts of the template pool (treespec.eval.prompt_pool,
    disjoint from MT-Bench and HumanEval); where each answer starts): the text a layer-skip search calibrates on."""
    from treespec.api import generate_batch
    from treespec.eval.prompt_pool import build_prompt_pool

    if pair.tokenizer is None:
        raise ConfigError("the layer-skip search needs the target's tokenizer")
    prompts = [encode_prompt(pair.tokenizer, p.text) for p in build_prompt_pool(pool_prompts, seed=pool_seed)]
    answers = generate_batch(pair.target, None, prompts, tree=None, max_new_tokens=new_tokens)
    return [p + a.tokens for p, a in zip(prompts, answers)], [len(p) for p in prompts]


def with_layer_skip(pair: LoadedPair, *, remeasure: bool = False, progress: Optional[Progress] = None) -> LoadedPair:
    """The pair with the target drafting for itself (a `treespec.models.layer_skip.LayerSkip`): the layers to skip
    chosen by the measured search of treespec.plan.layer_skip on the target as configured (cached per machine),
    and, when the pair has a profile, that draft's measured costs c(w) in it."""
    from treespec.plan.layer_skip import cached_layer_skip

    profile = pair.hardware.profile if pair.hardware is not None else None
    draft, costs, origin = cached_layer_skip(
        pair.target, lambda: layer_skip_calibration(pair, **CALIBRATION), calibration=CALIBRATION,
        relative_latency=profile.relative_latency(1) if profile is not None else None, remeasure=remeasure,
        progress=progress)
    hardware = pair.hardware
    if hardware is not None:
        if profile is not None:
            base = profile.pass_ms(1)
            profile = replace(profile, draft_ms={**profile.draft_ms, 1: {w: c * base for w, c in costs.items()}})
        hardware = replace(hardware, profile=profile, draft_dtype=hardware.target_dtype,
                           draft_layout=hardware.target_layout, origin=f"{hardware.origin}; layer skip {origin}")
    return replace(pair, draft=draft, hardware=hardware)


def with_target_weights(pair: LoadedPair, scheme: Optional[str]) -> LoadedPair:
    """The pair with the target's linear layers that lie on a 4-bit grid held in `scheme` ("int4" or "int4-a8",
    treespec.models.quantize.quantize_target_weights: the same model, a quarter of the bytes; in place); None or
    "auto" (left for `resolve_hardware` to choose): as is."""
    if scheme is None or scheme == "auto":
        return pair
    from treespec.models.quantize import quantize_target_weights

    return replace(pair, target=quantize_target_weights(pair.target, scheme))


def with_draft_precision(pair: LoadedPair, precision: Optional[str], layout: str = "standard") -> LoadedPair:
    """The pair with its draft in `precision` (a dtype name, or `models.precision.BF16_HEAD` for an EAGLE head:
    what `hardware=auto` may choose; in place) and linear `layout`; None: as is. For measuring a draft as the
    engine would run it."""
    if precision is None:
        return pair
    if pair.draft is None:
        raise ConfigError("a draft precision needs a draft model")
    from treespec.models.precision import configure

    return replace(pair, draft=configure(pair.draft, precision, layout))


def load_pair(target: Optional[str] = None, draft: Optional[str] = "default", *, hardware: str = "auto",
              device: torch.device | str = "cpu", dtype: str = "float32", layout: str = "auto",
              attn_implementation: str = "treespec_sdpa", progress: Optional[Progress] = None,
              target_weights: Optional[str] = "auto") -> LoadedPair:
    """Target, optional draft and the target's tokenizer, checked to fit together, and by default tuned to this
    machine. target: a built-in name or a directory (None: the default target); draft: likewise ("default": the
    default draft, None: no draft, "layerskip": the target itself with some layers skipped, `with_layer_skip`).

    hardware="auto" (the default) gives the models in the dtype and weight layout measured fastest on this machine
    with that profile in `.hardware` (measured on first use, about a minute for the default pair, then cached by the
    machine's identity; treespec.plan.hardware), so that `pair.costs` plans trees; dtype="auto" lets the profile
    choose between fp32 and bf16 too. hardware="none": the models as loaded, in `dtype` and `layout` (with "auto"
    for either, fp32 and the standard layout, left for `resolve_hardware` to choose; a named profile goes through
    `resolve_hardware` with its `HardwareSpec`). target_weights: "auto" lets hardware="auto" hold a target loaded
    from a 4-bit GGUF (the default target) as 4-bit codes where that plans faster (`pair.hardware.target_weights`
    says; the model decoded is then that quantized target), and the Qwen2.5-Coder 1.5B as "int4-a8"
    (`loading.default_target_weights`); "int4" or "int4-a8" always, None never."""
    from treespec.models.loading import DEFAULT_DRAFT, DEFAULT_TARGET, default_target_weights

    if hardware not in ("auto", "none"):
        raise ConfigError(f"load_pair takes hardware='auto' or 'none', got {hardware!r} (a named profile: "
                          "resolve_hardware with its HardwareSpec)")
    target = target or DEFAULT_TARGET
    draft = DEFAULT_DRAFT if draft == "default" else draft
    if hardware == "auto":
        target_weights = default_target_weights(target, target_weights)
    if draft == LAYER_SKIP:  # the target drafts for itself: tuned alone, then searched on as configured
        pair = load_pair(target, None, hardware=hardware, device=device, dtype=dtype, layout=layout,
                         attn_implementation=attn_implementation, progress=progress, target_weights=target_weights)
        return replace(with_layer_skip(pair, progress=progress), names=(target, LAYER_SKIP))
    device = resolve_device(str(device)) if isinstance(device, str) else device
    tokenizer = load_tokenizer(target)
    load_dtype = "float32" if dtype == "auto" else dtype
    target_model = load_model(target, dtype=load_dtype, device=device, attn_implementation=attn_implementation)
    draft_model = None
    if draft:
        if tokenizer is not None:
            check_tokenizers(target, draft, tokenizer)
        draft_model = load_model(draft, dtype=load_dtype, device=device, attn_implementation=attn_implementation)
        check_pair(target_model, draft_model)
    pair = with_target_weights(LoadedPair(target_model, draft_model, tokenizer, names=(target, draft or None)),
                               target_weights)
    if hardware == "none":  # as loaded (dtype "auto": fp32 and layout "auto": standard, for a later resolve_hardware)
        if layout != "auto":
            for model in (target_model, draft_model):
                if model is not None:
                    set_linear_layout(model, layout)
        return pair
    return resolve_hardware(HardwareSpec(name=hardware), pair, dtype=dtype, layout=layout, progress=progress,
                            settings={"target": target, "draft": draft}, target_weights=target_weights)


def resolve_hardware(spec: HardwareSpec, pair: LoadedPair, *, dtype: str = "float32", layout: str = "auto",
                     acceptance=None, progress: Optional[Progress] = None, settings: Optional[dict] = None,
                     target_weights: Optional[str] = "auto") -> LoadedPair:
    """The pair in the dtype and layout its profile chose, with that profile: measured or cached for `auto`
    (treespec.plan.hardware.auto_profile), as named otherwise. `acceptance` lets the target's configuration be
    chosen by planned tokens per second; `target_weights="auto"` lets `auto` hold a target loaded from a 4-bit
    GGUF as 4-bit codes where that plans faster (None: as it is)."""
    if spec.name == "auto":
        target, draft, resolved = auto_profile(pair.target, pair.draft, dtype=dtype, layout=layout,
                                               acceptance=acceptance, remeasure=spec.remeasure, repeats=spec.repeats,
                                               prefix_len=spec.prefix_len, settings=settings, progress=progress,
                                               draft_vocab=pair.draft_vocab, target_weights=target_weights)
    else:
        if dtype == "auto":
            raise ConfigError(f"dtype=auto is chosen by measurement: use hardware=auto, not hardware={spec.name}")
        target, draft, resolved = named_profile(pair.target, pair.draft, latency_profile(spec), spec.name, layout=layout)
    return LoadedPair(target, draft, pair.tokenizer, resolved, pair.draft_vocab, pair.names)


def resolve_batch_hardware(spec: HardwareSpec, pair: LoadedPair, batch_sizes, *, progress: Optional[Progress] = None,
                           settings: Optional[dict] = None, tree_sizes=None) -> tuple[Optional[LatencyProfile], str]:
    """(a profile holding these batch sizes, where it came from): `hardware.batch_profile` when set, else for `auto`
    measured on demand for the pair as `resolve_hardware` configured it and cached (treespec.plan.hardware), else
    none (a named profile holds the batch sizes it was measured at). `tree_sizes`: the n timed per B (default: the
    device's)."""
    wanted = sorted({int(b) for b in batch_sizes})
    if spec.batch_profile:
        profile = LatencyProfile.from_yaml(spec.batch_profile)
        missing = sorted(set(wanted) - set(profile.batch_sizes))
        if missing:
            raise ConfigError(f"batch profile {spec.batch_profile} has no batch sizes {missing}")
        return profile, f"batch profile {spec.batch_profile}"
    if spec.name == "auto":
        return batch_profile(pair.target, pair.draft, wanted, sizes=tree_sizes, prefix_len=spec.prefix_len,
                             repeats=spec.repeats,
                             remeasure=spec.remeasure, settings=settings, progress=progress,
                             draft_vocab=pair.draft_vocab)
    profile = pair.hardware.profile if pair.hardware is not None else None
    if profile is not None and set(wanted) <= set(profile.batch_sizes):
        return profile, pair.hardware.origin
    return None, f"none (hardware={spec.name} has no batch sizes {wanted}: set hardware.batch_profile=<file>)"


def load_data(spec: DataSpec, tokenizer) -> list[tuple[Prompt, list[int]]]:
    """The prompt set of a DataSpec, each prompt with its token ids (chat template applied as configured)."""
    if spec.skip < 0:
        raise ConfigError(f"data.skip must be >= 0, got {spec.skip}")
    prompts = load_prompts(spec.source, limit=None if spec.skip else spec.limit, shuffle_seed=spec.shuffle_seed)
    prompts = prompts[spec.skip:][: spec.limit]
    if not prompts:
        raise ConfigError(f"no prompts left in {spec.source} after skipping {spec.skip}")
    return [(p, encode_prompt(tokenizer, p.text, chat=spec.chat)) for p in prompts]
