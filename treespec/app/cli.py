"""Entry-point plumbing shared by `python -m treespec.generate` and the scripts in experiments/.

Not library code: this is where Hydra meets treespec. `run_app` registers the config schemas, checks the
command-line overrides before anything runs, and turns a caller's mistake (a bad override, a missing
model or file, an invalid value) into one line on stderr and exit status 2 instead of a traceback.
"""

from __future__ import annotations

import dataclasses
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import hydra
from hydra import compose, initialize_config_dir
from hydra.core.config_store import ConfigStore
from omegaconf import DictConfig, OmegaConf

from treespec.errors import TreespecError

CONF_DIR = Path(__file__).resolve().parents[2] / "conf"
EXIT_USAGE = 2


def fail(message: str) -> None:
    """Print `error: <message>` as one line and exit with status 2."""
    print(f"error: {' '.join(str(message).split())}", file=sys.stderr)
    sys.exit(EXIT_USAGE)


def register(schemas: dict[str, type]) -> None:
    """Register app schemas (config name -> dataclass; their typed fields validate the config groups)."""
    store = ConfigStore.instance()
    for name, node in schemas.items():
        store.store(name=name, node=node)


def _config_name(config_name: str, args: list[str]) -> tuple[str, list[str]]:
    """The config Hydra will compose (`--config-name X`, `-cn X` or `--config-name=X` override the app's) and the
    arguments without that flag."""
    rest, index = [], 0
    while index < len(args):
        arg = args[index]
        if arg in ("--config-name", "-cn") and index + 1 < len(args):
            config_name, index = args[index + 1], index + 2
            continue
        if arg.startswith("--config-name="):
            config_name = arg.split("=", 1)[1]
        else:
            rest.append(arg)
        index += 1
    return config_name, rest


def _precheck(config_name: str, args: list[str]) -> None:
    """Compose the config once with the given overrides so that mistakes fail fast and briefly."""
    config_name, args = _config_name(config_name, args)
    if any(a.startswith("-") for a in args):  # --help, --cfg, -m ... are Hydra's own business
        return
    try:
        with initialize_config_dir(config_dir=str(CONF_DIR), version_base=None):
            cfg = compose(config_name=config_name, overrides=args)
            OmegaConf.resolve(cfg)
    except Exception as err:  # noqa: BLE001  (any composition error is the caller's to fix)
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        fail(f"{first} (see --help for the options)")


def run_app(task: Callable[[DictConfig], Any], config_name: str, schemas: dict[str, type]) -> None:
    """Run `task(cfg)` as a Hydra app configured by conf/<config_name>.yaml."""
    register(schemas)
    _precheck(config_name, sys.argv[1:])

    @hydra.main(config_path=str(CONF_DIR), config_name=config_name, version_base=None)
    def _main(cfg: DictConfig) -> Any:
        try:
            return task(cfg)
        except TreespecError as err:
            fail(str(err))
        except KeyboardInterrupt:
            print("interrupted", file=sys.stderr)
            sys.exit(130)

    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    _main()


def to_spec(cls: type, node: DictConfig) -> Any:
    """A config group node as its schema dataclass (interpolations resolved)."""
    return cls(**OmegaConf.to_container(node, resolve=True))


def runtime(cfg: DictConfig):
    """The app's runtime settings (device, dtype, layout, threads, seed: the `runtime` group) as a RuntimeSpec."""
    from treespec.app.configs import RuntimeSpec

    return RuntimeSpec(**{f.name: cfg[f.name] for f in dataclasses.fields(RuntimeSpec)})


def progress_bar(desc: str = "measuring this machine") -> Callable[[str, int, int], None]:
    """A progress callback (what, done, total) drawing a tqdm bar on stderr; closes itself when done."""
    from tqdm import tqdm

    bar = None

    def update(what: str, done: int, total: int) -> None:
        nonlocal bar
        if bar is None:
            bar = tqdm(total=total, desc=desc, unit="step", leave=False)
        bar.set_postfix_str(what)
        bar.update(done - bar.n)
        if done >= total:
            bar.close()

    return update


def output_dir() -> Path:
    """The Hydra run (or multirun job) directory of the current app."""
    from hydra.core.hydra_config import HydraConfig

    return Path(HydraConfig.get().runtime.output_dir)
