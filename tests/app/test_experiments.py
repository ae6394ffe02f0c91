"""Experiment apps on tiny models: every config composes; run, multirun, acceptance, latency, tree, bench."""

import json
import os
import subprocess
import sys
from pathlib import Path

import batch_sweep
import bench  # experiments/ is on pytest's pythonpath (pyproject.toml)
import build_tree
import measure_acceptance
import position_agreement
import profile_latency
import pytest
import run
import source_oracle
import target_agreement
import torch
import yaml
from conftest import run_inprocess, tiny_model
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from treespec.app.cli import CONF_DIR, register, to_spec
from treespec.app.configs import HardwareSpec, ModelSpec, RuntimeSpec, TreeSpec
from treespec.app.demo import GenerateSchema
from treespec.app.session import open_session
from treespec.decode.sampling import SamplingConfig
from treespec.eval.bench import PassCounter
from treespec.eval.reporting import bench_table, format_table
from treespec.models import layouts
from treespec.models.lean import lean_unsupported
from treespec.plan.costs import LatencyProfile

ROOT = Path(__file__).parents[2]

SCHEMAS = {"run_schema": run.RunSchema, "bench_schema": bench.BenchSchema,
           "measure_acceptance_schema": measure_acceptance.MeasureAcceptanceSchema,
           "profile_latency_schema": profile_latency.ProfileLatencySchema,
           "build_tree_schema": build_tree.BuildTreeSchema, "generate_schema": GenerateSchema,
           "batch_sweep_schema": batch_sweep.BatchSweepSchema,
           "position_agreement_schema": position_agreement.PositionAgreementSchema,
           "target_agreement_schema": target_agreement.TargetAgreementSchema,
           "source_oracle_schema": source_oracle.SourceOracleSchema}


def _compose(name, overrides=()):
    register(SCHEMAS)
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base=None):
        return compose(config_name=name, overrides=list(overrides))


@pytest.mark.parametrize("experiment", sorted(p.stem for p in (CONF_DIR / "experiment").glob("*.yaml")))
def test_every_experiment_config_composes(experiment):
    cfg = _compose("run", [f"experiment={experiment}"])
    assert cfg.name == experiment and cfg.tree.policy and cfg.data.source


@pytest.mark.parametrize("name, overrides", [("run", []), ("bench", []), ("generate", []), ("measure_acceptance", []),
                                             ("profile_latency", []), ("build_tree", ["acceptance_file=a.yaml"]),
                                             ("batch_sweep", []), ("bench_plan", []),
                                             ("position_agreement", []), ("target_agreement", []),
                                             ("source_oracle", [])])
def test_every_app_config_composes(name, overrides):
    cfg = _compose(name, overrides)
    assert cfg.model.target if "model" in cfg else cfg.acceptance_file


@pytest.mark.parametrize("group", ["model", "tree", "sampling", "data", "hardware"])
def test_every_group_option_composes(group):
    for option in sorted(p.stem for p in (CONF_DIR / group).glob("*.yaml")):
        extra = {"tree": ["tree.file=x.yaml"], "data": ["data.source=x.jsonl"]}.get(group, [])
        cfg = _compose("run", [f"{group}={option}", *extra])
        assert cfg[group] is not None


def test_a_typo_is_an_error():
    with pytest.raises(Exception, match="tree.budgett"):
        _compose("run", ["tree.budgett=3"])


def _app(script, *args, process=False):
    """experiments/<script> with `args`, in this process (conftest.run_inprocess), or as a process of its own."""
    if process:
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        result = subprocess.run([sys.executable, str(ROOT / "experiments" / script), *args], capture_output=True,
                                text=True, timeout=300, cwd=ROOT, env=env)
    else:
        result = run_inprocess(f"experiments/{script}", args)
    assert result.returncode == 0, result.stderr[-3000:]
    return result


def test_smoke_run_writes_metrics_and_summary(tmp_path):
    _app("run.py", "experiment=smoke", f"hydra.run.dir={tmp_path}", process=True)  # as a process of its own
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    prompts = [r for r in rows if r["kind"] == "prompt"]
    passes = [r for r in rows if r["kind"] == "pass"]
    assert len(prompts) == 2 and all(r["new_tokens"] == 8 for r in prompts)
    assert sum(r["accepted"] for r in passes) == 16
    summary = json.loads((tmp_path / "summary.json").read_text())
    for key in ("tokens_per_second", "new_tokens", "target_passes", "mean_accepted", "predicted_accepted",
                "phase_seconds", "phase_ms_per_pass", "policy", "config"):
        assert key in summary
    assert summary["new_tokens"] == 16 and summary["mean_accepted"] == pytest.approx(16 / len(passes))
    assert (tmp_path / ".hydra" / "config.yaml").is_file()


def test_two_job_multirun(tmp_path):
    _app("run.py", "-m", "experiment=smoke", "tree.k=2,3", f"hydra.sweep.dir={tmp_path}")
    budgets = sorted(json.loads((tmp_path / job / "summary.json").read_text())["policy"]["budget"] for job in ("0", "1"))
    assert budgets == [3, 4]


def test_a_budget_sweep_sweeps(tmp_path):
    """tree.budget given without tree.max_depth: each job keeps its budget and the planner picks the depth."""
    (tmp_path / "conf" / "hardware").mkdir(parents=True)
    (tmp_path / "conf" / "hardware" / "made_up.yaml").write_text(
        "name: made_up\ntarget_ms: {1: 10.0, 4: 11.0, 8: 13.0, 16: 20.0}\ndraft_ms: 1.0\n")
    _app("run.py", "-m", "experiment=smoke", "tree=sequoia", "tree.budget=3,5,8", "hardware=made_up",
         f"hydra.searchpath=[file://{tmp_path / 'conf'}]", f"hydra.sweep.dir={tmp_path / 'sweep'}")
    policies = [json.loads((tmp_path / "sweep" / job / "summary.json").read_text())["policy"] for job in "012"]
    assert sorted(p["budget"] for p in policies) == [3, 5, 8]
    assert all(p["chosen"] == ["max_depth"] and p["given"] == {"budget": p["budget"]} for p in policies)
    assert all(p["predicted_speedup"] > 0 for p in policies)


def test_acceptance_latency_tree_pipeline(tmp_path):
    _app("measure_acceptance.py", "model=tiny", "data=pool", "data.limit=2", "max_new_tokens=8", "width=3", "depth=2",
         "threads=1", f"hydra.run.dir={tmp_path / 'acc'}")
    profile = yaml.safe_load((tmp_path / "acc" / "acceptance.yaml").read_text())
    assert len(profile["vector"]) == 3 and len(profile["matrix"]) == 2 and profile["settings"]["model"] == "tiny"
    assert profile["settings"]["draft_dtype"] is None
    _app("measure_acceptance.py", "model=tiny", "data=pool", "data.limit=1", "max_new_tokens=4", "draft_dtype=bfloat16",
         "threads=1", f"hydra.run.dir={tmp_path / 'acc_bf16'}")  # the draft alone in another precision
    assert yaml.safe_load((tmp_path / "acc_bf16" / "acceptance.yaml").read_text())["settings"]["draft_dtype"] == "bfloat16"

    _app("profile_latency.py", "model=tiny", "sizes=[1,2,4]", "repeats=2", "warmup=1", "prefix_len=16", "threads=1",
         "name=tiny_cpu", f"hydra.run.dir={tmp_path / 'lat'}")
    hardware = yaml.safe_load((tmp_path / "lat" / "hardware_tiny_cpu.yaml").read_text())
    assert sorted(hardware["target_ms"][1]) == [1, 2, 4] and hardware["draft_ms"][1][1] > 0
    (tmp_path / "conf" / "hardware").mkdir(parents=True)
    (tmp_path / "conf" / "hardware" / "tiny_cpu.yaml").write_text(yaml.safe_dump(hardware))

    assert sorted(hardware["draft_ms"][1]) == [1, 2, 4, 8, 16] and hardware["settings"]["machine"].startswith("cpu")
    bound = hardware["settings"]["bandwidth_bound"]  # t(1) against the bytes a pass reads / measured bandwidth
    assert bound["bandwidth_gbs"] > 0 and bound["pass_weight_mb"] > 0 and bound["t1_over_bound"] > 0
    breakdown = hardware["settings"]["pass_breakdown"]  # where the 1- and 8-token passes' time goes
    assert sorted(breakdown) == [1, 8] and breakdown[1]["wall_ms"] > 0 and breakdown[8]["dense products"] > 0
    _app("build_tree.py", f"acceptance_file={tmp_path / 'acc' / 'acceptance.yaml'}", "hardware=tiny_cpu",
         f"hydra.searchpath=[file://{tmp_path / 'conf'}]", "max_budget=4", f"hydra.run.dir={tmp_path / 'tree'}")
    tree = yaml.safe_load((tmp_path / "tree" / "tree.yaml").read_text())
    assert tree["provenance"]["hardware"] == "tiny_cpu" and "command" in tree["provenance"]
    assert tree["provenance"]["chosen"] == ["budget", "max_depth"]
    assert 1 <= tree["size"] <= 4

    _app("run.py", "experiment=smoke", "tree=file", f"tree.file={tmp_path / 'tree' / 'tree.yaml'}",
         f"hydra.run.dir={tmp_path / 'run'}")
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["policy"]["budget"] == tree["size"]


def test_position_agreement_replays_what_measure_acceptance_measures(tmp_path):
    common = ["model=tiny", "data=pool", "data.limit=3", "max_new_tokens=12", "width=3", "depth=2", "threads=1"]
    _app("measure_acceptance.py", *common, f"hydra.run.dir={tmp_path / 'acc'}")
    result = _app("position_agreement.py", *common, f"hydra.run.dir={tmp_path / 'pos'}")
    measured = yaml.safe_load((tmp_path / "acc" / "acceptance.yaml").read_text())
    report = yaml.safe_load((tmp_path / "pos" / "position_agreement.yaml").read_text())
    assert report["walk_p1_by_depth"] == [round(row[0], 4) for row in measured["matrix"]]
    assert report["walk_passes"] == measured["settings"]["target_passes"] and report["settings"]["prompts"] == 3
    assert len(report["agreement_by_depth"]) == 2 and report["in_draft_vocabulary"] == 1.0
    categories = report["by_category"]  # the pool's first 3 prompts span categories; their counts add up
    assert len(categories) > 1 and sum(c["walk_passes"] for c in categories.values()) == report["walk_passes"]
    assert sum(c["new_tokens"] for c in categories.values()) == report["new_tokens"]
    assert "where passes start" in result.stdout
    if layouts.onednn_available():  # the same decode on oneDNN-reordered weights (tiny models: no near-ties to flip)
        _app("position_agreement.py", *common, "layout=onednn", f"hydra.run.dir={tmp_path / 'onednn'}")
        again = yaml.safe_load((tmp_path / "onednn" / "position_agreement.yaml").read_text())
        assert again["settings"]["layout"] == "onednn" and report["settings"]["layout"] == "standard"
        assert again["walk_p1_by_depth"] == report["walk_p1_by_depth"] and again["walk_passes"] == report["walk_passes"]


def test_source_oracle_on_tiny_models(tmp_path):
    result = _app("source_oracle.py", "model=tiny", "hardware=none", "data=pool", "data.limit=2", "max_new_tokens=6", "longest=5",
                  "threads=1", "~sources", "+sources={lookup: {policy: ngram, ngram_budget: 4, ngram_depth: 4}, "
                  "line: {policy: chain, k: 3}}", f"hydra.run.dir={tmp_path}")
    report = yaml.safe_load((tmp_path / "source_oracle.yaml").read_text())
    lengths = report["step_lengths"]
    assert set(lengths) == {"lookup", "line"} and [len(p) for p in lengths["lookup"]] == [len(p) for p in lengths["line"]]
    assert report["tokens"] == sum(map(len, lengths["line"])) and report["settings"]["prompts"] == 2
    assert report["passes"]["best"] <= min(report["passes"]["lookup"], report["passes"]["line"])
    assert report["best_saves"] >= 1.0 and "fewer passes than the best single source" in result.stdout


def test_an_unpriced_policy_drafts_without_the_profiles_costs():
    model = to_spec(ModelSpec, OmegaConf.load(CONF_DIR / "model" / "tiny.yaml"))
    session = open_session(model, RuntimeSpec(threads=1), HardwareSpec(name="auto"), with_draft=False)
    lookup = TreeSpec(policy="ngram")
    assert session.policy(lookup, SamplingConfig()).policy.costs is not None  # cut every step to what pays
    assert session.policy(lookup, SamplingConfig(), priced=False).policy.costs is None  # the whole trie


def test_bench_on_tiny_models(tmp_path):
    result = _app("bench.py", "model=tiny", "hardware=none", "data=pool", "data.limit=2", "max_new_tokens=8",
                  "methods=[hf_generate,hf_assisted,llama_cpp,autoregressive,chain,kary,dynamic,hybrid]", "threads=1",
                  "trees.hybrid.model_policy=dynamic", "trees.hybrid.budget=6", "trees.hybrid.max_depth=4",  # no profile
                  f"hydra.run.dir={tmp_path}")
    assert "llama_cpp left out: " in result.stdout  # the tiny models have no GGUF file for llama.cpp
    table = json.loads((tmp_path / "bench.json").read_text())["table"]
    assert {(r["sampling"], r["method"]) for r in table} == {
        (s, m) for s in ("greedy", "t0.7") for m in ("hf_generate", "hf_assisted", "autoregressive", "chain", "kary",
                                                      "dynamic", "hybrid")}
    for row in table:
        if row["sampling"] == "greedy":
            assert row["greedy_parity"] == 1.0, row
        if row["method"] in ("hf_generate", "autoregressive"):
            assert row["tokens_per_pass"] == pytest.approx(1.0, abs=0.15)
    assert all(r["speedup"] == 1.0 for r in table if r["method"] == "hf_generate")
    for row in table:  # every method timed its prompts' pass, and decoding ran faster than prefill plus decoding
        assert 0 < row["prefill_seconds"] < row["seconds"], row
        assert row["decode_tokens_per_second"] > row["tokens_per_second"], row
    costs = {r["method"]: (r.get("draft_cost"), r.get("draft_mb")) for r in table}  # each drafter's c and weights
    assert costs["autoregressive"] == (0.0, 0.0) and costs["hf_generate"] == (None, None)
    assert costs["dynamic"][0] > 0 and costs["dynamic"][1] > 0 and costs["hybrid"][0] > 0
    assert "tokens/s" in result.stdout and (tmp_path / "bench.csv").is_file()
    rows = [json.loads(x) for x in (tmp_path / "bench_rows.jsonl").read_text().splitlines()]
    assert len(rows) == 2 * 2 * 7
    by_source = json.loads((tmp_path / "bench.json").read_text())["settings"]["acceptance_by_source"]
    assert set(by_source) <= {"greedy/hybrid", "t0.7/hybrid"} and "greedy/hybrid" in by_source
    first = [d for source in by_source["greedy/hybrid"].values() for d in source if d["depth"] == 1]
    assert first and all(0 <= d["accepted"] <= d["offered"] for d in first)


def test_the_pass_counter_hooks_the_target_only_while_counting():
    """A hook left on the target would silently keep the engine off its lean decoder in every treespec method."""
    model = tiny_model("llama")
    counter = PassCounter(model)
    assert lean_unsupported(model) is None
    with counter.counting():
        assert lean_unsupported(model) is not None
        model(input_ids=torch.tensor([[1, 2, 3]]))
        first = counter.first_seconds
        model(input_ids=torch.tensor([[4]]))
    assert counter.calls == 2 and lean_unsupported(model) is None
    assert first is not None and first > 0 and counter.first_seconds == first  # the first call's time only


def test_bench_table_arithmetic():
    rows = []
    for prompt, (base_t, fast_t) in enumerate([(2.0, 1.0), (4.0, 1.0)]):
        rows.append(dict(prompt_id=prompt, sampling="greedy", method="hf_generate", tokens=10, seconds=base_t,
                         passes=10, matches_reference=True))
        rows.append(dict(prompt_id=prompt, sampling="greedy", method="sequoia", tokens=10, seconds=fast_t, passes=4,
                         predicted_accepted=2.4, matches_reference=prompt == 0))
    table = {r["method"]: r for r in bench_table(rows)}
    assert table["sequoia"]["speedup"] == pytest.approx((20 / 2) / (20 / 6))
    assert table["sequoia"]["median_speedup"] == pytest.approx(3.0)  # median of 2x and 4x
    assert table["sequoia"]["tokens_per_pass"] == pytest.approx(2.5)
    assert table["sequoia"]["greedy_parity"] == 0.5 and table["hf_generate"]["speedup"] == 1.0
    text = format_table(list(table.values()))
    assert "sequoia" in text and "3.00x" in text and "50%" in text
    assert table["sequoia"]["prefill_seconds"] is None and table["sequoia"]["decode_vs_llama_cpp"] is None


def test_bench_table_splits_prefill_from_decoding():
    rows = [dict(prompt_id=p, sampling="greedy", method=method, tokens=10, seconds=seconds, prefill_seconds=prefill,
                 passes=10) for p in range(2)
            for method, seconds, prefill in [("llama_cpp", 3.0, 1.0), ("ngram", 1.5, 0.5), ("hf_generate", 4.0, None)]]
    table = {r["method"]: r for r in bench_table(rows)}
    assert table["ngram"]["vs_llama_cpp"] == pytest.approx(2.0)
    assert table["ngram"]["prefill_seconds"] == pytest.approx(1.0)
    assert table["ngram"]["decode_tokens_per_second"] == pytest.approx(20 / 2.0)
    assert table["llama_cpp"]["decode_tokens_per_second"] == pytest.approx(20 / 4.0)
    assert table["ngram"]["decode_vs_llama_cpp"] == pytest.approx(2.0)
    assert table["hf_generate"]["prefill_seconds"] is None and table["hf_generate"]["decode_vs_llama_cpp"] is None
    assert "2.00x" in format_table(list(table.values()))


def _batch_profile(path):
    """A hand-made batch profile for tiny runs: trees pay at B = 1 and stop paying at B = 4."""
    sizes = (1, 2, 4, 8, 16)
    target = {1: {n: 10.0 * (1 + 0.01 * (n - 1)) for n in sizes}, 2: {n: 10.0 * (1 + 0.05 * (n - 1)) for n in sizes},
              4: {n: 10.0 * n for n in sizes}}
    LatencyProfile(target, {b: {1: 0.5, 4: 0.8} for b in target}, settings={"device": "hand-made"}).to_yaml(path)
    return path


def _passes_by_prompt(run_dir):
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    out = {}
    for row in rows:
        if row["kind"] == "pass":
            out.setdefault(row["prompt_id"], []).append(row["accepted"])
    return out


def test_batched_run_equals_single_prompt_runs_and_plans_for_its_batch(tmp_path):
    common = ["experiment=smoke", "data.limit=3", "tree=sequoia", "tree.budget=6", "tree.max_depth=3"]
    _app("run.py", *common, f"hydra.run.dir={tmp_path / 'b1'}")
    _app("run.py", *common, "batch_size=2", f"hydra.run.dir={tmp_path / 'b2'}")
    assert _passes_by_prompt(tmp_path / "b1") == _passes_by_prompt(tmp_path / "b2")  # greedy rows as decoded alone
    single, batched = (json.loads((tmp_path / d / "summary.json").read_text()) for d in ("b1", "b2"))
    assert "batch_size" not in single and batched["batch_size"] == 2 and batched["batches"] == 2
    assert batched["new_tokens"] == single["new_tokens"] == 24 and batched["target_passes"] == single["target_passes"]
    assert batched["batched_passes"] < batched["target_passes"] and batched["policy"]["batch_size"] == 2
    assert batched["tokens_per_second"] == pytest.approx(batched["new_tokens"] / batched["seconds"])
    rows = [json.loads(line) for line in (tmp_path / "b2" / "metrics.jsonl").read_text().splitlines()]
    assert sorted({r["batch"] for r in rows}) == [0, 1]
    # the planner at B = 4 of a profile where the pass grows with every node: no tree
    profile = _batch_profile(tmp_path / "batch.yaml")
    result = _app("run.py", "experiment=smoke", "data.limit=4", "tree=sequoia", "batch_size=4",
                  f"hardware.batch_profile={profile}", f"hydra.run.dir={tmp_path / 'b4'}")
    planned = json.loads((tmp_path / "b4" / "summary.json").read_text())
    assert planned["policy"]["budget"] == 1 and planned["policy"]["hardware_aware"] and planned["mean_accepted"] == 1.0
    assert planned["hardware"]["batch_profile"] == f"batch profile {profile}" and "batch size 4" in result.stdout


def test_bench_with_a_batch_size(tmp_path):
    result = _app("bench.py", "model=tiny", "hardware=none", "data=pool", "data.limit=4", "max_new_tokens=8",
                  "methods=[hf_generate,hf_assisted,autoregressive,chain,dynamic]", "threads=1", "batch_size=2",
                  "samplings=[{name: greedy, temperature: 0.0, top_p: 1.0, top_k: 0}]", f"hydra.run.dir={tmp_path}")
    table = {r["method"]: r for r in json.loads((tmp_path / "bench.json").read_text())["table"]}
    assert set(table) == {"hf_generate", "autoregressive", "chain", "dynamic"}
    for row in table.values():
        assert row["greedy_parity"] == 1.0 and row["prompts"] == 2 and row["batch_size"] == 2  # 2 groups of 2
    assert table["autoregressive"]["tokens_per_pass"] == pytest.approx(1.0) and table["chain"]["tokens_per_pass"] > 1
    rows = [json.loads(x) for x in (tmp_path / "bench_rows.jsonl").read_text().splitlines()]
    assert len(rows) == 2 * 4 and all(len(r["output"]) == 2 and r["batched_passes"] >= 1 for r in rows)
    assert "batch size 2" in result.stdout and "hf_assisted left out" in result.stdout
    with pytest.raises(AssertionError, match="hf_assisted"):
        _app("bench.py", "model=tiny", "hardware=none", "batch_size=2", "methods=[hf_assisted]", f"hydra.run.dir={tmp_path}")


def test_batch_sweep_on_tiny_models(tmp_path):
    profile = _batch_profile(tmp_path / "batch.yaml")
    result = _app("batch_sweep.py", "model=tiny", "hardware=none", f"hardware.batch_profile={profile}", "data=pool",
                  "data.limit=4", "max_new_tokens=6", "batch_sizes=[1,2,4]", "threads=1",
                  "methods=[hf_generate,autoregressive,planned,n4_d3]", f"hydra.run.dir={tmp_path / 'out'}")
    out = json.loads((tmp_path / "out" / "batch_sweep.json").read_text())
    table = {(r["batch_size"], r["method"]): r for r in out["table"]}
    assert set(table) == {(b, m) for b in (1, 2, 4) for m in ("hf_generate", "autoregressive", "planned", "n4_d3")}
    assert all(r["greedy_parity"] == 1.0 and r["tokens"] == 4 * 6 for r in table.values())
    assert [p["speculates"] for p in out["plans"]] == [True, True, False]  # the hand-made profile: no tree at B = 4
    assert table[4, "planned"]["budget"] == 1 and table[1, "planned"]["budget"] > 1
    assert out["crossover"]["predicted_no_tree_from"] == 4
    for (b, method), row in table.items():
        assert row["speedup"] == pytest.approx(row["tokens_per_second"] / table[b, "autoregressive"]["tokens_per_second"])
        if method != "hf_generate":  # predictions next to measurements
            assert row["predicted_speedup"] is not None and row["predicted_tokens_per_second"] > 0
            assert row["predicted_tokens_per_pass"] >= 1
    assert table[2, "n4_d3"]["tokens_per_pass"] > 1 and table[2, "autoregressive"]["tokens_per_pass"] == 1.0
    csv_rows = (tmp_path / "out" / "batch_sweep.csv").read_text().splitlines()
    assert len(csv_rows) == 1 + 12 and (tmp_path / "out" / "plans.csv").is_file()
    assert "the tree planned per batch size" in result.stdout and "crossover" in result.stdout


def test_target_agreement_needs_a_target_on_a_4_bit_grid(tmp_path):
    result = run_inprocess("experiments/target_agreement.py", ["model=tiny", "data=pool", "data.limit=1",
                                                               "max_new_tokens=4", f"hydra.run.dir={tmp_path}"])
    assert result.returncode == 2 and "no linear layer of the target lies on a 4-bit grid" in result.stderr


@pytest.mark.real_models
def test_target_agreement_of_the_default_target(tmp_path):
    _app("target_agreement.py", "data.limit=1", "max_new_tokens=12", "threads=1", f"hydra.run.dir={tmp_path}")
    report = yaml.safe_load((tmp_path / "agreement.yaml").read_text())
    assert report["settings"]["positions"] == 12 and 0.8 <= report["top1_agreement"]["fp32 vs int4"] <= 1.0
