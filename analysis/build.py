"""Build the small result set the analysis notebooks read, then execute them headless (`make analysis`).

    python analysis/build.py                                   # default pair (smollm2), 8 prompts per set
    python analysis/build.py --model tiny --prompts 2 --max-new-tokens 8 --out /tmp/a --figures /tmp/f
    python analysis/build.py --model qwen2.5-coder --out outputs/analysis_qwen   # the optional real pair
    python analysis/build.py --skip-runs                       # re-execute the notebooks on existing results

Steps (each a subprocess of the experiments/ scripts; output goes to <out>/logs/):
  1. acceptance/   experiments/measure_acceptance.py on held-out pool prompts (spine tree, width 4, depth 3)
  2. profile/      a latency profile hardware_<name>.yaml: copied from --hardware, else measured on this
                   machine with experiments/profile_latency.py (which also fills hardware=auto's cache, so
                   the runs below use the same profile, weight layout and dtype)
  3. runs/         experiments/run.py -m: chain, k-ary, Sequoia, dynamic at one budget, and autoregressive,
                   on MT-Bench and HumanEval prompts, greedy
  4. sweep/        experiments/run.py -m: Sequoia over budgets x depth limits on MT-Bench prompts
  5. batch/        experiments/batch_sweep.py: batch sizes x (batched autoregressive, fixed Sequoia trees, the
                   tree planned per B) on MT-Bench prompts, with a batch profile (hardware=auto; skipped with
                   --hardware, which gives no batch profile)
  6. sources/     experiments/run.py -m: prompt lookup (ngram), lookahead and hybrid trees (draft + lookup) on MT-Bench and the
                   input-grounded edit requests, greedy: acceptance by source and depth
  7. notebooks/    analysis/tree_shapes.ipynb, analysis/acceptance.ipynb and analysis/sources.ipynb executed with
                   nbclient; they
                   read <out> and write their figures as PNG into --figures (the committed notebooks in
                   analysis/ are left untouched, without outputs)

The notebooks take their inputs from the environment: TREESPEC_RESULTS (the results dir), TREESPEC_FIGURES
(where PNGs go) and TREESPEC_HARDWARE (a hardware_*.yaml profile).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
ANALYSIS = ROOT / "analysis"
NOTEBOOKS = ("tree_shapes", "acceptance", "sources")
MARKER = ".treespec-analysis"  # marks a results dir made by this script (so that a rebuild may clear it)
STEPS = ("acceptance", "profile", "runs", "sweep", "batch", "sources", "notebooks", "logs")

# The equal-budget comparison: every static policy verifies BUDGET nodes per pass (incl. the root).
BUDGET, DEPTH = 10, 6
KARY_WIDTHS = (3, 2)  # 1 + 3 + 3 * 2 = 10 nodes
POLICIES = ("chain", "kary", "sequoia", "dynamic", "autoregressive")
DATASETS = ("mtbench", "humaneval")

# Per model: prompts per set, new tokens per prompt, torch threads, the sweep and the latency profile.
PRESETS = {
    "tiny": {"prompts": 3, "max_new_tokens": 16, "threads": 1, "sweep_budgets": "4,16", "sweep_depths": "4",
             "batch": {"batch_sizes": "[1,2,4]", "sizes": "[1,2,4,8]", "methods": "[autoregressive,planned,n4_d3,n8_d4]"},
             "profile": {"sizes": "[1,2,4,8,16,32]", "prefix_len": 64, "repeats": 3, "warmup": 1}},
    "smollm2": {"prompts": 8, "max_new_tokens": 64, "threads": 0, "sweep_budgets": "4,8,16",
                "sweep_depths": "3,6",
                "batch": {"batch_sizes": "[1,2,4,8]", "sizes": "null",
                          "methods": "[autoregressive,planned,n4_d3,n8_d4,n16_d5]"},
                "profile": {"sizes": "[1,2,3,4,6,8,12,16,24,32]", "prefix_len": 400, "repeats": 5,
                            "warmup": 2}},
    # the optional real pair (1.5B target): few prompts, one sweep depth, B <= 2, a coarse profile
    "qwen2.5-coder": {"prompts": 3, "max_new_tokens": 64, "threads": 0, "sweep_budgets": "8,16",
                      "sweep_depths": "6",
                      "batch": {"batch_sizes": "[1,2]", "sizes": "null", "methods": "[autoregressive,planned]"},
                      "profile": {"sizes": "[1,2,4,8,16,32]", "prefix_len": 256, "repeats": 3, "warmup": 1}},
}
DEFAULT_PRESET = "smollm2"  # for conf/model/ entries without a preset of their own


class BuildError(RuntimeError):
    pass


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="smollm2",
                        help="a conf/model/ entry: tiny, smollm2 (default), qwen2.5-coder (optional pair)")
    parser.add_argument("--out", type=Path, default=ROOT / "outputs" / "analysis", help="results directory")
    parser.add_argument("--figures", type=Path,
                        help="where the PNG figures go (default: analysis/figures for the default pair, "
                             "<out>/figures for any other model, so its figures never replace the committed ones)")
    parser.add_argument("--prompts", type=int, help="prompts per prompt set (default: 8 smollm2, 3 tiny and qwen2.5-coder)")
    parser.add_argument("--max-new-tokens", type=int,
                        help="new tokens per prompt (default: 64 smollm2 and qwen2.5-coder, 16 tiny)")
    parser.add_argument("--threads", type=int, help="torch threads of the runs (0 = torch's default)")
    parser.add_argument("--hardware", type=Path,
                        help="a hardware profile YAML (default: measure this machine, as hardware=auto does)")
    parser.add_argument("--skip-runs", action="store_true",
                        help="only execute the notebooks on existing results")
    parser.add_argument("--timeout", type=int, default=3600, help="seconds allowed per subprocess")
    args = parser.parse_args(argv)
    preset = PRESETS.get(args.model, PRESETS[DEFAULT_PRESET])
    args.prompts = args.prompts or preset["prompts"]
    args.max_new_tokens = args.max_new_tokens or preset["max_new_tokens"]
    args.threads = preset["threads"] if args.threads is None else args.threads
    args.preset = preset
    if args.figures is None:
        args.figures = ANALYSIS / "figures" if args.model == DEFAULT_PRESET else args.out / "figures"
    args.out, args.figures = args.out.resolve(), args.figures.resolve()
    return args


def run_step(name: str, command: list[str], out: Path, timeout: int) -> None:
    """Run one experiment quietly (log in <out>/logs/<name>.log); raise with the log's tail on failure."""
    log = out / "logs" / f"{name}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, PYTHONUNBUFFERED="1", TOKENIZERS_PARALLELISM="false", HYDRA_FULL_ERROR="1")
    start = time.perf_counter()
    print(f"[analysis] {name}: {' '.join(command[1:])}", flush=True)
    with open(log, "w") as handle:
        try:
            result = subprocess.run(command, check=False, cwd=ROOT, env=env, stdout=handle,
                                    stderr=subprocess.STDOUT, timeout=timeout)
        except subprocess.TimeoutExpired as err:
            raise BuildError(f"{name} timed out after {timeout} s; log: {log}\n{tail(log)}") from err
    if result.returncode != 0:
        raise BuildError(f"{name} failed (exit {result.returncode}); log: {log}\n{tail(log)}")
    print(f"[analysis] {name}: done in {time.perf_counter() - start:.0f} s", flush=True)


def tail(path: Path, lines: int = 30) -> str:
    """The last non-empty lines of a log (progress bars' carriage returns count as line breaks)."""
    text = path.read_text(errors="replace").replace("\r", "\n")
    return "\n".join([line for line in text.splitlines() if line.strip()][-lines:])


def model_config(model: str) -> dict:
    path = ROOT / "conf" / "model" / f"{model}.yaml"
    if not path.is_file():
        raise BuildError(f"unknown model '{model}': {path} does not exist")
    return yaml.safe_load(path.read_text()) or {}


def prepare_out(out: Path) -> None:
    """Create <out>, or clear the subdirectories a previous build wrote there (never anything else)."""
    if out.exists() and any(out.iterdir()) and not (out / MARKER).exists():
        raise BuildError(f"{out} exists and was not made by analysis/build.py; choose another --out")
    for step in STEPS:
        shutil.rmtree(out / step, ignore_errors=True)
    out.mkdir(parents=True, exist_ok=True)
    (out / MARKER).write_text("results of analysis/build.py\n")


def measure_acceptance(args) -> Path:
    run_dir = args.out / "acceptance"
    command = [sys.executable, "experiments/measure_acceptance.py", f"model={args.model}", "data=pool",
               f"data.limit={args.prompts}", f"max_new_tokens={args.max_new_tokens}", "width=4", "depth=3",
               f"threads={args.threads}", f"hydra.run.dir={run_dir}"]
    run_step("acceptance", command, args.out, args.timeout)
    return run_dir / "acceptance.yaml"


def hardware_profile(args) -> Path:
    """The profile the speedup surface uses, copied into <out>/profile/ (measured when none is given)."""
    target = args.out / "profile"
    target.mkdir(parents=True, exist_ok=True)
    given = args.hardware
    if given is not None:
        if not given.is_file():
            raise BuildError(f"hardware profile not found: {given}")
        name = (yaml.safe_load(given.read_text()) or {}).get("name", given.stem)
        copy = target / f"hardware_{name}.yaml"
        shutil.copyfile(given, copy)
        print(f"[analysis] profile: using {given}", flush=True)
        return copy
    settings = args.preset["profile"]
    name = f"{args.model}_analysis"
    command = [sys.executable, "experiments/profile_latency.py", f"model={args.model}", f"name={name}",
               f"sizes={settings['sizes']}", f"prefix_len={settings['prefix_len']}",
               f"repeats={settings['repeats']}", f"warmup={settings['warmup']}", f"threads={args.threads}",
               f"hydra.run.dir={target}"]
    run_step("profile", command, args.out, args.timeout)
    return target / f"hardware_{name}.yaml"


def acceptance_override(args, measured: Path) -> list[str]:
    """`tree.acceptance=[...]` from the measured profile when the model config has no greedy vector."""
    if model_config(args.model).get("acceptance_greedy"):
        return []
    vector = (yaml.safe_load(measured.read_text()) or {}).get("vector") or []
    vector = [round(float(p), 4) for p in vector]
    while len(vector) > 1 and vector[-1] == 0:
        vector.pop()
    if not any(vector):
        raise BuildError(f"no acceptance vector in the model config, and {measured} is empty")
    return [f"tree.acceptance=[{','.join(map(str, vector))}]"]


def common_overrides(args) -> list[str]:
    # hardware=auto finds the profile step's measurement in the cache (same prefix length and threads)
    hardware = (["hardware=none"] if args.hardware else
                ["hardware=auto", f"hardware.prefix_len={args.preset['profile']['prefix_len']}"])
    return [f"model={args.model}", *hardware, "sampling=greedy", f"data.limit={args.prompts}",
            "data.shuffle_seed=0", f"max_new_tokens={args.max_new_tokens}", f"threads={args.threads}"]


def decode_runs(args, acceptance: list[str]) -> None:
    widths = ",".join(map(str, KARY_WIDTHS))
    run_step("runs", [sys.executable, "experiments/run.py", "-m", *common_overrides(args), *acceptance,
                      f"tree={','.join(POLICIES)}", f"data={','.join(DATASETS)}", f"tree.budget={BUDGET}",
                      f"tree.max_depth={DEPTH}", f"tree.k={BUDGET - 1}", f"tree.widths=[{widths}]",
                      f"hydra.sweep.dir={args.out / 'runs'}", "hydra.sweep.subdir=${name}"],
             args.out, args.timeout)
    run_step("sweep", [sys.executable, "experiments/run.py", "-m", *common_overrides(args), *acceptance,
                       "tree=sequoia", "data=mtbench", f"tree.budget={args.preset['sweep_budgets']}",
                       f"tree.max_depth={args.preset['sweep_depths']}",
                       f"hydra.sweep.dir={args.out / 'sweep'}",
                       "hydra.sweep.subdir=sequoia_n${tree.budget}_d${tree.max_depth}"],
             args.out, args.timeout)


def source_runs(args) -> None:
    """Trees from several sources: prompt lookup and lookahead alone and the hybrid tree, on chat and on
    input-grounded prompts."""
    run_step("sources", [sys.executable, "experiments/run.py", "-m", *common_overrides(args), "tree=ngram,lookahead,hybrid",
                         "data=mtbench,edit", f"hydra.sweep.dir={args.out / 'sources'}",
                         "hydra.sweep.subdir=${tree.policy}_${data.name}"],
             args.out, args.timeout)


def batch_sweep(args, acceptance: list[str]) -> None:
    """Batch sizes x trees with the tree planned per B (needs hardware=auto's batch profile and the model config's
    acceptance: skipped otherwise)."""
    if args.hardware or acceptance:
        print("[analysis] batch: skipped (" + ("--hardware gives no batch profile" if args.hardware else
                                               "the model config has no acceptance vector to plan with") + ")", flush=True)
        return
    settings = args.preset["batch"]
    prompts = max(args.prompts, max(int(b) for b in settings["batch_sizes"].strip("[]").split(",")))
    overrides = [o for o in common_overrides(args) if not o.startswith("data.limit=")]
    run_step("batch", [sys.executable, "experiments/batch_sweep.py", *overrides, "data=mtbench",
                       f"data.limit={prompts}", f"batch_sizes={settings['batch_sizes']}", f"sizes={settings['sizes']}",
                       f"methods={settings['methods']}", f"hydra.run.dir={args.out / 'batch'}"],
             args.out, args.timeout)


def execute_notebooks(args, hardware: Path | None) -> list[Path]:
    """Execute each notebook on a copy; write the executed copies to <out>/notebooks/; return new PNGs."""
    import nbformat
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError

    args.figures.mkdir(parents=True, exist_ok=True)
    for folder in ("notebooks", "logs"):
        (args.out / folder).mkdir(parents=True, exist_ok=True)
    os.environ.update(TREESPEC_RESULTS=str(args.out), TREESPEC_FIGURES=str(args.figures))
    if hardware is not None:
        os.environ["TREESPEC_HARDWARE"] = str(hardware)
    start_time = time.time()
    for name in NOTEBOOKS:
        notebook = nbformat.read(ANALYSIS / f"{name}.ipynb", as_version=4)
        executed = args.out / "notebooks" / f"{name}.ipynb"
        client = NotebookClient(notebook, timeout=args.timeout, kernel_name="python3",
                                resources={"metadata": {"path": str(ANALYSIS)}})
        print(f"[analysis] notebook {name}.ipynb", flush=True)
        try:
            with open(args.out / "logs" / f"kernel_{name}.log", "w") as log:  # the kernel's own stderr
                client.execute(stderr=log)
        except CellExecutionError as err:
            nbformat.write(notebook, executed)
            raise BuildError(f"{name}.ipynb failed (executed copy: {executed}):\n{str(err)[-4000:]}") from err
        nbformat.write(notebook, executed)
    return sorted(p for p in args.figures.glob("*.png") if p.stat().st_mtime >= start_time - 1)


def find_hardware(out: Path) -> Path | None:
    found = sorted((out / "profile").glob("hardware_*.yaml"))
    return found[0] if found else None


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        if args.skip_runs:
            if not args.out.is_dir():
                raise BuildError(f"--skip-runs: no results in {args.out}; run without --skip-runs first")
            hardware = args.hardware.resolve() if args.hardware else find_hardware(args.out)
        else:
            model_config(args.model)
            prepare_out(args.out)
            measured = measure_acceptance(args)
            hardware = hardware_profile(args)
            override = acceptance_override(args, measured)
            decode_runs(args, override)
            batch_sweep(args, override)
            source_runs(args)
        figures = execute_notebooks(args, hardware)
    except BuildError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    print(f"[analysis] {len(figures)} figures in {args.figures}: {', '.join(p.name for p in figures)}")
    stale = sorted(set(args.figures.glob("*.png")) - set(figures))
    if stale:
        print(f"[analysis] not rewritten by this build (stale?): {', '.join(p.name for p in stale)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
