"""Measure t(n) and c for a pair on this device and write a hardware profile (config: conf/profile_latency.yaml).

    python experiments/profile_latency.py                         # default pair on this machine
    python experiments/profile_latency.py device=cuda dtype=bfloat16 name=h200_smollm2 install=true

Writes hardware_<name>.yaml (the conf/hardware/ format: name, target_ms, draft_ms, settings) into the run
directory, and with install=true also to conf/hardware/<name>.yaml so that `hardware=<name>` selects it.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass, field
from typing import Optional

import torch
import yaml
from omegaconf import DictConfig
from tqdm import tqdm

from treespec import cli
from treespec.configs import ModelSpec, load_pair, resolve_device
from treespec.latency import measure_latency


@dataclass
class ProfileLatencySchema:
    model: ModelSpec = field(default_factory=ModelSpec)
    name: Optional[str] = None  # None: <device type>_<model name>
    sizes: list[int] = field(default_factory=lambda: [1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64])
    prefix_len: int = 400
    repeats: int = 7
    warmup: int = 2
    install: bool = False
    device: str = "auto"
    dtype: str = "float32"
    threads: int = 0
    target: str = "${model.target}"
    draft: Optional[str] = "${model.draft}"


def run(cfg: DictConfig):
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    model = cli.to_spec(ModelSpec, cfg.model)
    device = resolve_device(cfg.device)
    pair = load_pair(cfg.target, cfg.draft, device=device, dtype=cfg.dtype,
                     attn_implementation=model.attn_implementation)
    with tqdm(total=cfg.warmup + cfg.repeats, desc="latency", unit="round") as bar:
        profile = measure_latency(pair.target, pair.draft, sizes=list(cfg.sizes), prefix_len=cfg.prefix_len,
                                  repeats=cfg.repeats, warmup=cfg.warmup, progress=lambda _: bar.update(1),
                                  settings={"target": cfg.target, "draft": cfg.draft, "model": model.name})
    measured = profile.to_dict()
    name = cfg.name or f"{device.type}_{model.name}"
    data = {"name": name, "target_ms": measured["target_ms"], "draft_ms": round(profile.draft_ms, 4),
            "settings": {**measured["settings"], "relative_latency": measured["relative_latency"],
                         "draft_cost": measured["draft_cost"]}}
    path = cli.output_dir() / f"hardware_{name}.yaml"
    path.write_text(f"# measured by experiments/profile_latency.py on {profile.settings['device']}\n"
                    + yaml.safe_dump(data, sort_keys=False))
    print(f"t(n): {measured['relative_latency']}\nc = {profile.draft_cost:.4f} (target 1-token pass "
          f"{profile.target_ms[1]:.2f} ms, draft step {profile.draft_ms:.2f} ms) -> {path}")
    if cfg.install:
        installed = cli.CONF_DIR / "hardware" / f"{name}.yaml"
        shutil.copyfile(path, installed)
        print(f"installed as hardware={name} ({installed})")
    return profile


if __name__ == "__main__":
    torch.set_grad_enabled(False)
    cli.run_app(run, "profile_latency", {"profile_latency_schema": ProfileLatencySchema})
