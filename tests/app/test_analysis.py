"""analysis/: `build.py` on tiny models end to end (runs, profile, every notebook headless, PNG figures),
`load.py` on the results and on hand-made rows, and the committed notebooks carry no outputs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import nbformat
import pandas as pd
import pytest

from analysis import build  # the repository root is on pytest's pythonpath (pyproject.toml)
from analysis.load import depth_rank_acceptance, explode_ranks, find_run_dirs, load_batch_sweeps, load_runs, read_config

ROOT = Path(__file__).parents[2]

NOTEBOOKS = [ROOT / "analysis" / f"{name}.ipynb" for name in build.NOTEBOOKS]
FIGURES = {
    "tree_shapes": ["trees_by_acceptance", "sequoia_shape_vs_p1", "sequoia_depth_width_vs_p1",
                    "expected_tokens_curves", "expected_tokens_heatmap", "pairs_trees", "pairs_draft_cost",
                    "speedup_surface",
                    "policies_equal_budget", "policy_trees_equal_budget", "batch_speedup"],
    "acceptance": ["measured_vs_predicted", "acceptance_depth_rank", "acceptance_vector",
                   "accepted_length_distribution", "tokens_per_pass_by_category"],
    "sources": ["acceptance_by_source_depth", "winning_source_by_step"],
}


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """One small result set for the module: `analysis/build.py --model tiny`, as `make analysis` runs it."""
    base = tmp_path_factory.mktemp("analysis")
    results, figures = base / "results", base / "figures"
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    result = subprocess.run([sys.executable, "analysis/build.py", "--model", "tiny", "--out", str(results),
                             "--figures", str(figures), "--prompts", "2", "--max-new-tokens", "8"],
                            cwd=ROOT, env=env, capture_output=True, text=True, timeout=600, check=False)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return results, figures


def test_build_executes_every_notebook_and_writes_every_figure(built):
    results, figures = built
    for name in build.NOTEBOOKS:
        executed = nbformat.read(results / "notebooks" / f"{name}.ipynb", as_version=4)
        code = [cell for cell in executed.cells if cell.cell_type == "code"]
        assert code and all(cell.execution_count for cell in code), f"{name}: not every cell ran"
        errors = [out for cell in code for out in cell.outputs if out.output_type == "error"]
        assert not errors, f"{name}: {errors}"
        for figure in FIGURES[name]:
            path = figures / f"{figure}.png"
            assert path.is_file() and path.stat().st_size > 10_000, f"{path} missing or empty"
            assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    expected = sorted(figure for names in FIGURES.values() for figure in names)
    assert sorted(p.stem for p in figures.glob("*.png")) == expected
    assert list((results / "profile").glob("hardware_*.yaml"))
    assert (results / "acceptance" / "acceptance.yaml").is_file()
    sweeps = load_batch_sweeps(results)  # the batch sweep: B 1, 2, 4 x four methods, plans per B
    assert sorted(sweeps.table["batch_size"].unique()) == [1, 2, 4] and len(sweeps.table) == 3 * 4
    assert sorted(sweeps.plans["batch_size"]) == [1, 2, 4] and sweeps.table["predicted_speedup"].notna().all()
    assert (sweeps.table["greedy_parity"] == 1.0).all() and len(sweeps.latest().crossover) == 1


def test_committed_notebooks_have_no_outputs_and_are_left_untouched_by_the_build(built):
    for path in NOTEBOOKS:
        notebook = nbformat.read(path, as_version=4)
        nbformat.validate(notebook)
        assert notebook.metadata["kernelspec"]["name"] == "python3"
        for cell in notebook.cells:
            if cell.cell_type == "code":
                assert cell.outputs == [] and cell.execution_count is None, f"{path.name} has outputs"


def test_load_runs_matches_metrics_files(built):
    results, _ = built
    sources = load_runs(results / "sources")  # prompt lookup and hybrid trees on chat and edit prompts
    assert sorted(zip(sources.summaries["policy"], sources.summaries["data"])) == [
        ("hybrid", "edit"), ("hybrid", "mtbench"), ("lookahead", "edit"), ("lookahead", "mtbench"), ("ngram", "edit"),
        ("ngram", "mtbench")]
    assert sources.passes["offered_sources"].map(len).sum() > 0
    runs = load_runs(results).without(results / "sources")
    run_dirs = sorted(p.parent for p in results.rglob("summary.json") if p.parent.parent.name != "sources")
    sweep_jobs = 2  # the tiny preset's Sequoia sweep: budgets 4, 16 at depth limit 4
    assert len(runs) == len(run_dirs) == len(build.POLICIES) * len(build.DATASETS) + sweep_jobs
    assert len(load_runs(results)) == len(runs) + len(sources)
    kinds = {"pass": 0, "prompt": 0}
    for run_dir in run_dirs:
        for line in (run_dir / "metrics.jsonl").read_text().splitlines():
            kinds[json.loads(line)["kind"]] += 1
    assert len(runs.passes) == kinds["pass"] and len(runs.prompts) == kinds["prompt"]
    summaries = runs.summaries
    for column in ("run_dir", "run", "tree.policy", "tree.budget", "tree.max_depth", "sampling.temperature",
                   "data.name", "model.name", "max_new_tokens", "mean_accepted", "predicted_accepted",
                   "phase_ms_per_pass.target", "policy.acceptance", "label"):
        assert column in summaries.columns, column
    assert set(summaries["policy"]) == set(build.POLICIES) and set(summaries["data"]) == set(build.DATASETS)
    assert (summaries["model"] == "tiny").all() and (summaries["sampling.temperature"] == 0.0).all()
    kary = summaries[summaries["tree.policy"] == "kary"]
    assert kary["tree.widths"].iloc[0] == tuple(build.KARY_WIDTHS)
    sweep = summaries[summaries["run_dir"].map(lambda d: Path(d).parent.name == "sweep")]
    assert sorted(sweep["tree.budget"]) == [4, 16] and (sweep["depth"] <= sweep["tree.max_depth"]).all()
    assert sorted(sweep["label"].str.split(" d=").str[0]) == ["sequoia n=16", "sequoia n=4"]
    # each pass row carries its run's aliases; tokens per pass recomputed from the rows equal the summaries
    merged = runs.passes.groupby("run_dir")["accepted"].agg(["sum", "count"])
    totals = summaries.set_index("run_dir")
    assert (merged["sum"] == totals.loc[merged.index, "new_tokens"]).all()
    assert (merged["count"] == totals.loc[merged.index, "target_passes"]).all()
    assert set(runs.passes["policy"]) == set(build.POLICIES)
    joined = runs.with_config(runs.prompts, "tree.budget", "data.name")
    assert len(joined) == len(runs.prompts) and (joined["data.name"] == joined["data"]).all()
    chain = runs.select(tree__policy="chain", data="humaneval")
    assert len(chain) == 1 and set(chain.prompts["category"]) == {"humaneval"}
    # a glob and a single run directory find the same runs
    equal_budget = [d.resolve() for d in run_dirs if d.parent.name == "runs"]
    assert find_run_dirs(str(results / "runs" / "*")) == equal_budget
    assert len(load_runs([run_dirs[0]])) == 1


def test_explode_ranks_on_hand_made_rows():
    passes = pd.DataFrame({"run_dir": ["a", "a", "b"], "step": [0, 1, 0], "tree_depth": [4, 4, 3],
                           "accepted_ranks": [[0, 1, 0], [], [2]]},
                          index=[7, 7, 9])  # duplicate index labels on purpose
    long = explode_ranks(passes)
    assert long[["run_dir", "step", "depth", "rank"]].values.tolist() == [
        ["a", 0, 1, 0], ["a", 0, 2, 1], ["a", 0, 3, 0], ["b", 0, 1, 2]]
    assert "accepted_ranks" not in long.columns


def test_depth_rank_acceptance_on_hand_made_rows():
    # Trees of 3 levels (depths 1-2). Pass 1: rank 0 then rank 1; pass 2: nothing accepted; pass 3: rank 1 at
    # depth 1 only; pass 4: rank 0 at depth 1 in a tree of 2 levels (so no observation at depth 2).
    passes = pd.DataFrame({"tree_depth": [3, 3, 3, 2], "accepted_ranks": [[0, 1], [], [1], [0]]})
    share, observed = depth_rank_acceptance(passes)
    assert observed.tolist() == [4, 2]
    assert share.loc[1].tolist() == [0.5, 0.25] and share.loc[2].tolist() == [0.0, 0.5]
    assert list(share.columns) == [1, 2] and share.index.name == "depth"


def test_read_config_falls_back_to_hydra_config(tmp_path):
    run_dir = tmp_path / "nested" / "job"
    (run_dir / ".hydra").mkdir(parents=True)
    summary = {"new_tokens": 4, "target_passes": 2, "mean_accepted": 2.0,
               "policy": {"policy": "chain", "budget": 3, "depth": 3}}
    (run_dir / "summary.json").write_text(json.dumps(summary))
    (run_dir / ".hydra" / "config.yaml").write_text("tree: {policy: chain, k: 2}\ntarget: ${tree.policy}_x\n")
    (run_dir / "metrics.jsonl").write_text(
        '{"kind": "pass", "prompt_id": "1", "step": 0, "tree_size": 3, "tree_depth": 3, "accepted": 2, '
        '"accepted_ranks": [0]}\n{"kind": "prompt", "prompt_id": "1", "new_tokens": 2}\n')
    assert read_config(run_dir) == {"tree": {"policy": "chain", "k": 2}, "target": "chain_x"}
    runs = load_runs(tmp_path)
    columns = ["tree.k", "policy", "budget", "label"]
    assert runs.summaries[columns].values.tolist() == [[2, "chain", 3, "chain n=3"]]
    assert len(runs.passes) == 1 and len(runs.prompts) == 1 and runs.passes["label"].tolist() == ["chain n=3"]
    assert len(load_runs(tmp_path / "nowhere")) == 0


def test_build_refuses_a_results_dir_it_did_not_make(tmp_path, capsys):
    (tmp_path / "precious.txt").write_text("keep me")
    assert build.main(["--model", "tiny", "--out", str(tmp_path), "--figures", str(tmp_path / "f")]) == 1
    assert "was not made by analysis/build.py" in capsys.readouterr().err
    assert (tmp_path / "precious.txt").read_text() == "keep me"


def test_presets_and_where_figures_go(tmp_path):
    default = build.parse_args(["--out", str(tmp_path)])
    assert default.preset is build.PRESETS["smollm2"] and default.figures == (build.ANALYSIS / "figures").resolve()
    qwen = build.parse_args(["--model", "qwen2.5-coder", "--out", str(tmp_path)])
    # the 1.5B pair's own preset (few prompts); its figures never replace the committed default-pair ones
    assert qwen.preset is build.PRESETS["qwen2.5-coder"] and qwen.prompts < default.prompts
    assert qwen.figures == (tmp_path / "figures").resolve()
    assert build.parse_args(["--model", "tiny", "--out", str(tmp_path), "--figures", str(tmp_path / "f"),
                             "--prompts", "5"]).prompts == 5
    for preset in build.PRESETS.values():  # every preset names what each step reads
        assert {"prompts", "max_new_tokens", "threads", "sweep_budgets", "sweep_depths", "batch", "profile"} <= set(preset)
