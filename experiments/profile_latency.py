"""Measure a pair's step costs on this device and write them as a named hardware profile
(config: conf/profile_latency.yaml).

    python experiments/profile_latency.py                         # default pair on this machine
    python experiments/profile_latency.py dtype=auto layout=auto  # also choose fp32/bf16 and the weight layout
    python experiments/profile_latency.py device=cuda dtype=bfloat16 name=h200_smollm2 install=true

Measures what `hardware=auto` measures (treespec.plan.hardware.auto_profile: t(n), the draft's cost per level
width, the engine's per-step overheads, and with layout/dtype `auto` the faster configuration of each model),
always anew, and refreshes the auto cache with it. On a CPU it also reports t(1) against the bandwidth bound
(treespec.plan.bandwidth: the bytes a 1-token pass reads / this machine's measured read bandwidth). Writes
hardware_<name>.yaml (the conf/hardware/ format) into the run directory, and with install=true also to
conf/hardware/<name>.yaml so that `hardware=<name>` selects it.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass, field
from typing import Optional

import torch
import yaml
from omegaconf import DictConfig

from treespec.app import cli
from treespec.app.configs import HardwareSpec, ModelSpec, RuntimeSpec, TreeSpec, acceptance_for
from treespec.app.session import open_session
from treespec.decode.sampling import SamplingConfig
from treespec.models.lean import lean_decoder
from treespec.plan.bandwidth import memory_bandwidth, pass_bytes
from treespec.plan.breakdown import pass_breakdown
from treespec.plan.hardware import auto_profile


@dataclass
class ProfileLatencySchema(RuntimeSpec):
    model: ModelSpec = field(default_factory=ModelSpec)
    name: Optional[str] = None  # None: <device type>_<model name>
    sizes: list[int] = field(default_factory=lambda: [1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64])
    prefix_len: int = 400
    repeats: int = 7
    warmup: int = 2
    install: bool = False
    breakdown_sizes: list[int] = field(default_factory=lambda: [1, 8])  # tree sizes whose pass is broken down
    target: str = "${model.target}"
    draft: Optional[str] = "${model.draft}"


def profile_document(name: str, profile, resolved) -> dict:
    """A conf/hardware/ entry: the HardwareSpec fields, with derived values and provenance under settings."""
    measured = profile.to_dict()
    return {"name": name, **{key: measured[key] for key in ("target_ms", "draft_ms", "overhead_ms",
                                                           "baseline_overhead_ms")},
            "settings": {**measured["settings"], "target_dtype": resolved.target_dtype,
                         "draft_dtype": resolved.draft_dtype, "relative_latency": measured["relative_latency"],
                         "draft_costs": measured["draft_costs"]}}


def run(cfg: DictConfig):
    model = cli.to_spec(ModelSpec, cfg.model)
    session = open_session(model, cli.runtime(cfg), HardwareSpec(name="none"), target=cfg.target, draft=cfg.draft,
                           tune=False)
    target, _, resolved = auto_profile(session.target, session.draft, dtype=cfg.dtype, layout=cfg.layout,
                                  acceptance=acceptance_for(model, TreeSpec(), SamplingConfig()), remeasure=True,
                                  sizes=list(cfg.sizes), repeats=cfg.repeats, warmup=cfg.warmup,
                                  prefix_len=cfg.prefix_len, progress=cli.progress_bar("profiling"),
                                  target_weights=model.target_weights,
                                  settings={"target": cfg.target, "draft": cfg.draft, "model": model.name})
    profile = resolved.profile
    device = next(target.parameters()).device
    bound = None
    if device.type == "cpu":  # the floor of a 1-token pass here: the bytes it reads / the measured read bandwidth
        bandwidth = memory_bandwidth()
        read = pass_bytes(target, cfg.prefix_len)
        bound = {"bandwidth_gbs": round(bandwidth, 2), "pass_weight_mb": round(read.weights / 1e6, 1),
                 "pass_kv_mb": round(read.kv_cache / 1e6, 1), "bound_ms": round(read.total / bandwidth / 1e6, 3),
                 "t1_over_bound": round(profile.pass_ms() / (read.total / bandwidth / 1e6), 2)}
        profile.settings["bandwidth_bound"] = bound
    # where a pass's time goes (products, attention, LM head, small operators, Python and dispatch)
    breakdowns = ([pass_breakdown(target, n, prefix_len=cfg.prefix_len) for n in cfg.breakdown_sizes]
                  if lean_decoder(target) is not None else [])
    profile.settings["pass_breakdown"] = {b.tokens: {"wall_ms": round(b.wall_ms, 3), "operators": b.operators,
                                                     **{k: round(v, 3) for k, v in b.ms.items()}} for b in breakdowns}
    name = cfg.name or f"{device.type}_{model.name}"
    path = cli.output_dir() / f"hardware_{name}.yaml"
    path.write_text(f"# measured by experiments/profile_latency.py on {resolved.device}\n"
                    + yaml.safe_dump(profile_document(name, profile, resolved), sort_keys=False))
    costs = profile.draft_costs()
    print(f"{resolved.device}; target {resolved.target_dtype} {resolved.target_layout}"
          + (f", draft {resolved.draft_dtype} {resolved.draft_layout}" if resolved.draft_dtype else "")
          + f"\nt(n): { {n: round(v, 3) for n, v in profile.relative_latency().items()} }"
          + f"\nc(w): { {w: round(v, 4) for w, v in costs.items()} } (target 1-token pass {profile.pass_ms():.2f} ms)"
          + f"\noverhead per step: {profile.overhead_ms.get(1, 0.0):.2f} ms speculative, "
            f"{profile.baseline_overhead_ms.get(1, 0.0):.2f} ms autoregressive -> {path}")
    if bound is not None:
        print(f"bandwidth bound: a 1-token pass reads {bound['pass_weight_mb']} MB of weights + {bound['pass_kv_mb']} MB "
              f"of cache at {bound['bandwidth_gbs']} GB/s ({torch.get_num_threads()} threads) = {bound['bound_ms']} ms; "
              f"t(1) = {profile.pass_ms():.2f} ms is {bound['t1_over_bound']}x that")
    for breakdown in breakdowns:
        print("breakdown: " + breakdown.line())
    if cfg.install:
        installed = cli.CONF_DIR / "hardware" / f"{name}.yaml"
        shutil.copyfile(path, installed)
        print(f"installed as hardware={name} ({installed})")
    return profile


if __name__ == "__main__":
    torch.set_grad_enabled(False)
    cli.run_app(run, "profile_latency", {"profile_latency_schema": ProfileLatencySchema})
