"""One session helper for the demo and every experiment: pair -> hardware -> policy.

    session = open_session(model_spec, runtime_spec, hardware_spec, progress=progress_bar())
    choice = session.policy(tree_spec, sampling, batch_size=4)     # a PolicyChoice planned for B = 4
    outs = generate_batch(session.target, session.draft, prompts, tree=choice.policy, ...)

`open_session` sets the thread count, resolves the device, loads the pair (checked to share a tokenizer), applies
the model config's draft weights and vocabulary, and resolves the hardware profile (hardware=auto: the dtype and
layout measured fastest on this machine, cached). Profiles at other batch sizes are measured on demand and kept.
`default_tree(pair)` gives a pair from `load_pair` the tree the demo drafts with (`treespec.default_tree`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

import torch
from omegaconf import OmegaConf

from treespec.app.configs import (
    LAYER_SKIP,
    HardwareSpec,
    LoadedPair,
    ModelSpec,
    PolicyChoice,
    RuntimeSpec,
    TreeSpec,
    acceptance_for,
    build_policy,
    load_pair,
    resolve_batch_hardware,
    resolve_device,
    resolve_hardware,
    with_draft_precision,
    with_draft_vocab,
    with_draft_weights,
    with_layer_skip,
    with_target_weights,
)
from treespec.decode.sampling import SamplingConfig
from treespec.errors import ConfigError
from treespec.models.layer_skip import LayerSkip
from treespec.models.loading import default_target_weights
from treespec.models.precision import body_dtype, configure
from treespec.plan.costs import LatencyProfile
from treespec.plan.hardware import Progress


@dataclass
class Session:
    """A loaded pair configured for this machine, and how trees are planned for it."""

    pair: LoadedPair
    model: ModelSpec
    runtime: RuntimeSpec
    hardware_spec: HardwareSpec
    names: dict[str, Optional[str]]  # target and draft as asked for (names or directories)
    progress: Optional[Progress] = None
    _profiles: dict[int, tuple[Optional[LatencyProfile], str]] = field(default_factory=dict)
    _drafts: dict[str, Any] = field(default_factory=dict)  # other drafts by name, loaded once

    @property
    def target(self):
        return self.pair.target

    @property
    def draft(self):
        return self.pair.draft

    @property
    def tokenizer(self):
        return self.pair.tokenizer

    @property
    def hardware(self):
        return self.pair.hardware

    @property
    def draft_vocab(self) -> Optional[torch.Tensor]:
        return self.pair.draft_vocab

    def profile(self, batch_size: int = 1) -> tuple[Optional[LatencyProfile], str]:
        """(the profile that plans trees at batch size B, where it came from); B > 1 is measured on demand."""
        batch_size = int(batch_size)
        if batch_size not in self._profiles:
            if batch_size == 1 and not self.hardware_spec.batch_profile:
                hardware = self.pair.hardware
                self._profiles[1] = (hardware.profile, hardware.origin) if hardware else (None, "none")
            else:
                self._profiles[batch_size] = resolve_batch_hardware(self.hardware_spec, self.pair, (batch_size,),
                                                                    progress=self.progress, settings=self.names)
        return self._profiles[batch_size]

    def profile_batches(self, batch_sizes, tree_sizes=None) -> tuple[Optional[LatencyProfile], str]:
        """(one profile holding every batch size in `batch_sizes`, measured together, at tree sizes `tree_sizes`
        (default: the device's); where it came from). Later `profile(B)` calls for these sizes return it."""
        sizes = sorted({int(b) for b in batch_sizes})
        if sizes == [1] and not self.hardware_spec.batch_profile and tree_sizes is None:
            return self.profile(1)
        found = resolve_batch_hardware(self.hardware_spec, self.pair, sizes, progress=self.progress,
                                       settings=self.names, tree_sizes=tree_sizes)
        self._profiles.update({b: found for b in sizes})
        return found

    def policy(self, tree: TreeSpec, sampling: SamplingConfig, batch_size: int = 1, priced: bool = True) -> PolicyChoice:
        """The tree policy for `tree` at batch size B, planned with that batch size's costs where it needs them
        (priced=False: without the profile's costs, e.g. prompt lookup's whole trie every step)."""
        return planned_policy(self.pair, self.model, tree, sampling, self.profile(batch_size)[0] if priced else None,
                              batch_size)

    def other_draft(self, name: str):
        """Another draft for the same target (a method's own draft, the assisted-generation assistant), in the dtype
        (without a bf16 EAGLE output layer) and layout chosen for the pair's draft; loaded once per name."""
        if name == self.names["draft"] and self.pair.draft is not None:
            return self.pair.draft
        if name not in self._drafts:
            self._drafts[name] = self._load_draft(name)
        return self._drafts[name]

    def _load_draft(self, name: str):
        if name == LAYER_SKIP:
            return with_layer_skip(self.pair, progress=self.progress).draft
        other = load_pair(self.names["target"], name, hardware="none", device=next(self.target.parameters()).device,
                          attn_implementation=self.model.attn_implementation, layout="standard").draft
        hardware = self.pair.hardware
        if hardware is None:
            return other
        return configure(other, body_dtype(hardware.draft_dtype or hardware.target_dtype),
                         hardware.draft_layout or hardware.target_layout)

    def summary(self) -> dict[str, Any]:
        """The hardware summary for run files (device, dtypes, layouts, where the profile came from)."""
        return self.pair.hardware.summary() if self.pair.hardware is not None else {"name": "none"}

    def describe(self) -> str:
        """One line: the machine, the models' dtype and layout, and where the profile came from."""
        hardware = self.pair.hardware
        if hardware is None:
            return "no hardware profile"
        return f"{hardware.device}; {hardware.models()}; hardware profile {hardware.origin}"


def open_session(model: ModelSpec, runtime: RuntimeSpec, hardware: HardwareSpec, *, target: Optional[str] = None,
                 draft: Optional[str] = None, with_draft: bool = True, tune: bool = True,
                 draft_precision: Optional[str] = None, sampling: SamplingConfig | None = None,
                 progress: Optional[Progress] = None) -> Session:
    """Load and configure a pair (see the module docstring). target / draft: names or directories (default: the
    model spec's); with_draft=False loads the target alone; tune=False skips the hardware profile and keeps the
    models as loaded (measurements that must not depend on this machine's choice), `draft_precision` then sets
    the draft's (e.g. `models.precision.BF16_HEAD`). `sampling` picks the acceptance a target configuration is
    planned with (greedy by default)."""
    if runtime.threads:
        torch.set_num_threads(int(runtime.threads))
    target = target or model.target
    draft = (draft if draft is not None else model.draft) if with_draft else None
    if with_draft and not draft:
        raise ConfigError("this run needs a draft model: set draft=<name or dir> (or model.draft)")
    names = {"target": target, "draft": draft}
    self_draft = draft == LAYER_SKIP  # the target drafts for itself once it is configured
    draft = None if self_draft else draft
    pair = load_pair(target, draft, hardware="none", device=resolve_device(runtime.device), dtype=runtime.dtype,
                     attn_implementation=model.attn_implementation, layout=runtime.layout, target_weights=None)
    target_weights = default_target_weights(target, model.target_weights) if tune else model.target_weights
    pair = with_target_weights(pair, target_weights)
    pair = with_draft_weights(pair, model.draft_weights if draft else None)
    pair = with_draft_vocab(pair, model.draft_vocab if draft else None)
    pair = with_draft_precision(pair, draft_precision, runtime.layout if runtime.layout != "auto" else "standard")
    if tune:
        acceptance = acceptance_for(model, TreeSpec(), sampling or SamplingConfig())
        pair = resolve_hardware(hardware, pair, dtype=runtime.dtype, layout=runtime.layout, acceptance=acceptance,
                                target_weights=target_weights,
                                progress=progress, settings=names)
    if self_draft:
        pair = with_layer_skip(pair, progress=progress)
    return Session(pair, model, runtime, hardware, names, progress)


def planned_policy(pair: LoadedPair, model: ModelSpec, tree: TreeSpec, sampling: SamplingConfig,
                   profile: Optional[LatencyProfile], batch_size: int = 1) -> PolicyChoice:
    """`tree` for `pair` at batch size B, planned with `profile`'s costs (None: unpriced) and the acceptance `model`
    holds for the pair's draft precision under `sampling` (a layer-skipping draft's own, from its search)."""
    hardware = pair.hardware
    acceptance = acceptance_for(model, tree, sampling, hardware.draft_dtype if hardware is not None else None)
    if isinstance(pair.draft, LayerSkip) and not tree.acceptance:  # the search's, not the model spec's draft's
        acceptance = pair.draft.acceptance
    return build_policy(tree, acceptance, profile, hardware.name if hardware is not None else "", batch_size)


def model_spec_for(target: Optional[str], draft: Optional[str]) -> ModelSpec:
    """The model config (conf/model/*.yaml) whose target and draft are these built-in names."""
    from treespec.app import cli

    if target is None:
        raise ConfigError("this pair carries no names (LoadedPair.names): load it with treespec.load_pair(target, "
                          "draft) to find its model config")
    for path in sorted((cli.CONF_DIR / "model").glob("*.yaml")):
        spec = OmegaConf.load(path)
        if spec.get("target") == target and spec.get("draft") == draft:
            return cli.to_spec(ModelSpec, spec)
    raise ConfigError(f"no model config in conf/model has target {target!r} and draft {draft!r}, so no acceptance "
                      "was measured for this pair: build a tree yourself (treespec.policies, e.g. "
                      "Hybrid(Dynamic(6, 4, 3), costs=pair.costs)), or measure its acceptance "
                      "(experiments/measure_acceptance.py) into a model config")


def demo_tree_spec() -> TreeSpec:
    """The tree config `python -m treespec.generate` uses by default (conf/generate.yaml's `tree` entry)."""
    from treespec.app import cli

    defaults = OmegaConf.load(cli.CONF_DIR / "generate.yaml").defaults
    name = next(entry["tree"] for entry in defaults if not isinstance(entry, str) and "tree" in entry)
    return cli.to_spec(TreeSpec, OmegaConf.merge(OmegaConf.structured(TreeSpec),
                                                 OmegaConf.load(cli.CONF_DIR / "tree" / f"{name}.yaml")))


def default_tree(pair: LoadedPair, sampling: SamplingConfig | None = None) -> PolicyChoice:
    """The tree `python -m treespec.generate` drafts with for `pair` (a pair from `load_pair`): conf/generate.yaml's
    tree, planned with the pair's profile (`pair.hardware`, batch size 1) and the acceptance its model config holds
    for its draft's precision under `sampling` (greedy by default)."""
    profile = pair.hardware.profile if pair.hardware is not None else None
    return planned_policy(pair, model_spec_for(*pair.names), demo_tree_spec(), sampling or SamplingConfig(), profile)
