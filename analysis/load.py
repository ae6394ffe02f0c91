"""Read decoding runs (experiments/run.py output directories) into pandas DataFrames.

    from analysis.load import load_runs
    runs = load_runs("outputs/analysis")          # a directory, a glob, or a list of them
    runs.summaries      # one row per run
    runs.passes         # one row per target pass
    runs.prompts        # one row per prompt

A *run directory* is any directory holding `summary.json` (found recursively under each path given), with
`metrics.jsonl` beside it and, when Hydra wrote it, `.hydra/config.yaml`.

Columns of `summaries`:
    run_dir                   the run directory (str), the join key of all three tables
    run                       run_dir relative to the deepest directory common to all runs
    model, policy, budget, depth, data, sampling, label    short aliases (see `KEYS`): budget and depth
                              are the tree's nodes and levels as run (a Sequoia tree may use fewer levels
                              than tree.max_depth allows; for dynamic trees they are the limits); `label`
                              reads e.g. "sequoia n=10 d=3" or "chain n=10"
    prompts, new_tokens, target_passes, seconds, tokens_per_second, mean_accepted (tokens per pass),
    predicted_accepted (G of the static tree, None for dynamic trees), mean_tree_size
    phase_seconds.<phase>, phase_ms_per_pass.<phase>, policy.<key>    summary.json, flattened
    <group>.<key>             the run's configuration flattened, e.g. tree.policy, tree.budget,
                              sampling.temperature, data.name, model.name, max_new_tokens (lists become
                              tuples so that they can be grouped on)

Columns of `passes` (metrics.jsonl rows with kind "pass"):
    run_dir, prompt_id, category, step, tree_size (nodes verified incl. the root), tree_depth (levels incl.
    the root), accepted (tokens produced incl. the bonus), accepted_ranks (list: 0-based sibling rank of
    each accepted draft node, by depth), draft_s, target_s, verify_s, commit_s, and the aliases above.

Columns of `prompts` (metrics.jsonl rows with kind "prompt"):
    run_dir, prompt_id, category, prompt_len, new_tokens, target_passes, mean_accepted, seconds,
    tokens_per_second, stop_reason, prefill_s, draft_s, target_s, verify_s, commit_s, and the aliases.

Use `Runs.with_config(frame, *columns)` to add any other summary/config column to a pass or prompt table,
`Runs.select(...)` to keep some runs. Helpers: `explode_ranks` (one row per accepted draft node: depth,
rank), `depth_rank_acceptance` (empirical P[d, k] from pass rows), `find_files` (profiles and other YAML
written beside the runs).

Batch sweeps (experiments/batch_sweep.py writes batch_sweep.json, not a run directory) are read by
`load_batch_sweeps(paths)`: `table` has one row per (sweep, batch_size, method) with tokens_per_second,
tokens_per_pass (per row), speedup (over batched autoregressive at that B), speedup_vs_hf, predicted_speedup,
predicted_tokens_per_pass, predicted_tokens_per_second, budget, depth; `plans` one row per (sweep, batch_size)
with the tree the planner chose (budget, depth, speculates, predicted values); `sweep` is the directory.
"""

from __future__ import annotations

import glob
import json
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

# Short alias -> flattened key it is read from (first present wins).
KEYS: dict[str, tuple[str, ...]] = {
    "model": ("model.name",),
    "policy": ("policy.policy", "tree.policy"),
    "budget": ("policy.budget", "tree.budget"),
    "depth": ("policy.depth", "tree.max_depth"),
    "data": ("data.name",),
    "sampling": ("sampling.name",),
}
ALIASES = (*KEYS, "label")


@dataclass(frozen=True)
class Runs:
    """Three tables over the same run directories (see the module docstring for their columns)."""

    summaries: pd.DataFrame
    passes: pd.DataFrame
    prompts: pd.DataFrame

    def __len__(self) -> int:
        return len(self.summaries)

    def with_config(self, frame: pd.DataFrame, *columns: str) -> pd.DataFrame:
        """`frame` (with a run_dir column) joined with the given `summaries` columns."""
        missing = [c for c in columns if c not in self.summaries.columns]
        if missing:
            raise KeyError(f"no such summary/config columns: {missing}")
        wanted = [c for c in columns if c not in frame.columns]
        return frame.merge(self.summaries[["run_dir", *wanted]], on="run_dir", how="left")

    def without(self, folder: str | os.PathLike) -> Runs:
        """The runs outside `folder` (e.g. build.py's sources/ runs, which the sources notebook reads apart)."""
        inside = Path(folder).resolve()
        return self._keep({d for d in self.summaries.get("run_dir", []) if inside not in Path(d).resolve().parents})

    def select(self, **equal: Any) -> Runs:
        """The runs whose summary columns equal the given values, e.g. `select(data="mtbench")`
        (keyword names use `__` for dots: `tree__policy="chain"`)."""
        mask = pd.Series(True, index=self.summaries.index)
        for key, value in equal.items():
            mask &= self.summaries[key.replace("__", ".")] == value
        return self._keep(set(self.summaries.loc[mask, "run_dir"]))

    def _keep(self, run_dirs: set) -> Runs:
        def rows(frame):
            return frame[frame["run_dir"].isin(run_dirs)].reset_index(drop=True) if "run_dir" in frame else frame
        return Runs(rows(self.summaries), rows(self.passes), rows(self.prompts))


def flatten(data: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested mappings -> one level with dotted keys; lists become tuples (hashable, groupable)."""
    flat: dict[str, Any] = {}
    for key, value in data.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            flat.update(flatten(value, f"{name}."))
        elif isinstance(value, list):
            flat[name] = _tuple(value)
        else:
            flat[name] = value
    return flat


def _tuple(value: Any) -> Any:
    return tuple(_tuple(v) for v in value) if isinstance(value, (list, tuple)) else value


def find_run_dirs(paths: str | os.PathLike | Iterable[str | os.PathLike]) -> list[Path]:
    """Every directory holding summary.json under the given directories or glob patterns, sorted."""
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    found: set[Path] = set()
    for pattern in paths:
        matches = glob.glob(os.path.expanduser(str(pattern)), recursive=True) or []
        for match in map(Path, matches):
            if match.is_file() and match.name == "summary.json":
                found.add(match.parent.resolve())
            elif match.is_dir():
                found.update(p.parent.resolve() for p in match.rglob("summary.json"))
    return sorted(found)


def read_config(run_dir: str | os.PathLike) -> dict[str, Any]:
    """The run's configuration: summary.json's resolved `config`, else Hydra's .hydra/config.yaml."""
    run_dir = Path(run_dir)
    summary = json.loads((run_dir / "summary.json").read_text())
    if isinstance(summary.get("config"), Mapping):
        return dict(summary["config"])
    hydra_config = run_dir / ".hydra" / "config.yaml"
    if not hydra_config.is_file():
        return {}
    from omegaconf import OmegaConf

    config = OmegaConf.load(hydra_config)
    try:
        return OmegaConf.to_container(config, resolve=True)
    except Exception:  # noqa: BLE001  (an interpolation that only resolves inside Hydra: keep it as text)
        return OmegaConf.to_container(config, resolve=False)


def _label(row: Mapping[str, Any]) -> str:
    policy = row.get("policy")
    if policy in (None, "autoregressive") or _missing(row.get("budget")):
        return str(policy)
    text = f"{policy} n={int(row['budget'])}"
    if policy in ("sequoia", "dynamic") and not _missing(row.get("depth")):
        text += f" d={int(row['depth'])}"
    return text


def _missing(value: Any) -> bool:
    return value is None or (isinstance(value, float) and np.isnan(value))


def summary_row(run_dir: str | os.PathLike) -> dict[str, Any]:
    """One run's summary.json and configuration as a flat dict (the `summaries` columns)."""
    run_dir = Path(run_dir)
    summary = json.loads((run_dir / "summary.json").read_text())
    summary.pop("config", None)
    row = {"run_dir": str(run_dir), **flatten(read_config(run_dir)), **flatten(summary)}
    for alias, keys in KEYS.items():
        row[alias] = next((row[k] for k in keys if not _missing(row.get(k))), None)
    row["label"] = _label(row)
    return row


def read_metrics(run_dir: str | os.PathLike) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(pass rows, prompt rows) of a run's metrics.jsonl (empty lists when the file is absent)."""
    path = Path(run_dir) / "metrics.jsonl"
    passes: list[dict[str, Any]] = []
    prompts: list[dict[str, Any]] = []
    if path.is_file():
        for line in path.read_text().splitlines():
            if line.strip():
                row = json.loads(line)
                kind = row.pop("kind", None)
                if kind == "pass":
                    passes.append(row)
                elif kind == "prompt":
                    prompts.append(row)
    return passes, prompts


def load_runs(paths: str | os.PathLike | Iterable[str | os.PathLike]) -> Runs:
    """Load every run directory found under `paths` (directories, glob patterns, or a list of them)."""
    summaries, passes, prompts = [], [], []
    for run_dir in find_run_dirs(paths):
        row = summary_row(run_dir)
        summaries.append(row)
        keys = {"run_dir": row["run_dir"], **{alias: row[alias] for alias in ALIASES}}
        pass_rows, prompt_rows = read_metrics(run_dir)
        passes += [{**keys, **r} for r in pass_rows]
        prompts += [{**keys, **r} for r in prompt_rows]
    frame = pd.DataFrame(summaries, columns=None if summaries else ["run_dir", "run", *ALIASES])
    if summaries:
        root = os.path.commonpath([str(Path(d).parent) for d in frame["run_dir"]])
        frame.insert(1, "run", [os.path.relpath(d, root) for d in frame["run_dir"]])
    empty = ["run_dir", *ALIASES]
    return Runs(frame, pd.DataFrame(passes, columns=None if passes else empty),
                pd.DataFrame(prompts, columns=None if prompts else empty))


def explode_ranks(passes: pd.DataFrame) -> pd.DataFrame:
    """One row per accepted draft node: the pass table's columns (without accepted_ranks) plus
    `depth` (1-based: the root's children are depth 1) and `rank` (0-based sibling rank).
    Passes that accepted no draft token contribute no row."""
    lengths = passes["accepted_ranks"].map(len).to_numpy()
    rows = passes.drop(columns=["accepted_ranks"]).iloc[np.repeat(np.arange(len(passes)), lengths)]
    ranks = [r for ranks in passes["accepted_ranks"] for r in ranks]
    depths = [d for ranks in passes["accepted_ranks"] for d in range(1, len(ranks) + 1)]
    return rows.assign(depth=np.asarray(depths, dtype=np.int64), rank=np.asarray(ranks, dtype=np.int64)) \
        .reset_index(drop=True)


def depth_rank_acceptance(passes: pd.DataFrame, max_depth: int | None = None,
                          max_rank: int | None = None) -> tuple[pd.DataFrame, pd.Series]:
    """Empirical acceptance by depth and sibling rank from pass rows: (P, observations).

    An observation at depth d is a pass whose accepted path reached depth d-1 and whose tree had a level
    at depth d (tree_depth >= d + 1). P.loc[d, k] = (# observations at depth d where the rank-k child was
    accepted) / (# observations at depth d), with k 1-based as in P_k: the unconditional acceptance vector
    at depth d (rows sum to at most 1). Exact for chains and spine-like trees; for trees where an accepted
    node can be a leaf above the tree's last level it underestimates (that pass still counts as an
    observation). Returns P [depth x rank] (index `depth`, columns `rank` 1..K) and the observation
    counts per depth.
    """
    lengths = passes["accepted_ranks"].map(len).to_numpy()
    levels = passes["tree_depth"].to_numpy()
    deepest = int(max(levels.max(initial=1) - 1, 0)) if max_depth is None else int(max_depth)
    long = explode_ranks(passes[["accepted_ranks", "tree_depth"]])
    ranks = int(long["rank"].max() + 1) if max_rank is None and len(long) else int(max_rank or 1)
    counts = np.zeros((deepest, ranks))
    for d, k in zip(long["depth"], long["rank"]):
        if d <= deepest and k < ranks:
            counts[d - 1, k] += 1
    observed = np.array([((lengths >= d - 1) & (levels >= d + 1)).sum() for d in range(1, deepest + 1)])
    with np.errstate(invalid="ignore", divide="ignore"):
        share = np.where(observed[:, None] > 0, counts / np.maximum(observed[:, None], 1), np.nan)
    index = pd.RangeIndex(1, deepest + 1, name="depth")
    return (pd.DataFrame(share, index=index, columns=pd.RangeIndex(1, ranks + 1, name="rank")),
            pd.Series(observed, index=index, name="observations"))


def find_files(root: str | os.PathLike, pattern: str) -> list[Path]:
    """Files matching `pattern` (e.g. "hardware_*.yaml", "acceptance.yaml") anywhere under `root`,
    newest first."""
    root = Path(root)
    if not root.is_dir():
        return []
    return sorted(root.rglob(pattern), key=lambda p: p.stat().st_mtime, reverse=True)


@dataclass(frozen=True)
class BatchSweeps:
    """The batch sweeps found under some paths (see the module docstring)."""

    table: pd.DataFrame
    plans: pd.DataFrame
    crossover: dict[str, dict[str, Any]]  # sweep -> {"predicted_no_tree_from", "measured_no_tree_from", ...}

    def latest(self) -> BatchSweeps:
        """Only the most recently written sweep."""
        if self.table.empty:
            return self
        newest = max(self.crossover, key=lambda d: (Path(d) / "batch_sweep.json").stat().st_mtime)
        return BatchSweeps(self.table[self.table["sweep"] == newest].reset_index(drop=True),
                           self.plans[self.plans["sweep"] == newest].reset_index(drop=True), {newest: self.crossover[newest]})


def load_batch_sweeps(paths: str | os.PathLike | Iterable[str | os.PathLike]) -> BatchSweeps:
    """Every batch_sweep.json under the given directories or glob patterns."""
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    files: set[Path] = set()
    for pattern in paths:
        for match in map(Path, glob.glob(os.path.expanduser(str(pattern)), recursive=True)):
            if match.is_file() and match.name == "batch_sweep.json":
                files.add(match.resolve())
            elif match.is_dir():
                files.update(p.resolve() for p in match.rglob("batch_sweep.json"))
    table, plans, crossover = [], [], {}
    for path in sorted(files):
        data = json.loads(path.read_text())
        sweep = str(path.parent)
        table += [{"sweep": sweep, **row} for row in data.get("table", [])]
        plans += [{"sweep": sweep, **row} for row in data.get("plans", [])]
        crossover[sweep] = data.get("crossover") or {}
    return BatchSweeps(pd.DataFrame(table, columns=None if table else ["sweep", "batch_size", "method"]),
                       pd.DataFrame(plans, columns=None if plans else ["sweep", "batch_size", "budget"]), crossover)
