"""The certificate's case grid (`make certify`): which cases run, how each one runs, and its table.

Verification level: every sampling mode (without / with replacement, deterministic) x temperature {0.7, 1, 1.5} x
{plain, top-p 0.9, top-k 3}: `draws` steps of treespec.decode.verify on an irregular 4-level DP tree with
context-indexed random p and q rows (vocabulary 6), continued to L = 4 tokens; greedy over `greedy_tables` random
tables (exact). End to end: tiny Llama, Qwen2 and GPT-2 targets (vocabulary 6) with a DP-built irregular static
tree, Paths (with replacement), Dynamic trees, the EAGLE head (Llama, Qwen2), EOS under sampling, an adaptive
(confidence-stopped) tree, a draft vocabulary subset, batched decoding (a ragged batch), prompt lookup without a
draft model, hybrid trees (model and lookup branches, on a prompt that repeats itself), lookahead (a Jacobi window
and its n-gram pool, alone with lookup and inside a batched hybrid tree), Medusa heads (alone and batched) and layer-skip
self-drafts (a 2-layer target with one layer skipped, alone and batched); `runs` seeded runs of
the engine each, first L = 4 tokens against the enumerated law, and each case asserts that steps accepted a
non-first sibling and their full depth and then went on.

A case passes when its family (joint + per-position conditional tests, Holm) is not rejected at `alpha` and no
impossible sequence appeared; its power is the detectable bias (first position, a token of probability 0.2, power
0.9), which `targets` bounds per level.
"""

from __future__ import annotations

import time

import torch

from treespec.decode.sampling import SamplingConfig
from treespec.drafters import policies
from treespec.drafters.sources import Hybrid, Lookahead, NGram
from treespec.drafters.vocab import vocab_subset
from treespec.eval import certify
from treespec.models.layer_skip import skipping
from treespec.plan.costs import StepCosts
from treespec.plan.optimizer import sequoia_tree

VOCAB = 6
LENGTH = 4
PROMPT = (1, 4, 2)
FILLER = (3, 0, 5, 1, 2, 4, 0)  # the longer row of a ragged batch (batched cases)
LOOKUP_PROMPT = (1, 4, 2, 3, 1, 4, 5, 0, 1, 4)  # "1 4" recurs with two continuations: prompt lookup branches
LOOKUP_FILLER = (2, 3, 1, 4, 2, 3, 1, 5, 0, 4, 2, 3)
VERIFY_SHAPE = dict(accept=[0.5, 0.2, 0.1, 0.05], budget=10, max_depth=4)
E2E_TREE = dict(accept=[0.5, 0.2, 0.1], budget=7, max_depth=3)
PROCESSING = {"plain": {}, "top-p 0.9": {"top_p": 0.9}, "top-k 3": {"top_k": 3}}
NEEDED_E2E = ("non-contiguous commit, then more", "full depth + bonus, then more")


def verification_cases() -> list[dict]:
    cases = []
    for mode in ("without_replacement", "with_replacement", "deterministic"):
        for temperature in (0.7, 1.0, 1.5):
            for name, extra in PROCESSING.items():
                cases.append({"level": "verification", "name": f"verify {mode} T={temperature} {name}", "mode": mode,
                              "sampling": dict(temperature=temperature, **extra)})
    cases.append({"level": "verification", "name": "verify greedy", "mode": "greedy", "sampling": {"temperature": 0.0}})
    return cases


def end_to_end_cases() -> list[dict]:
    cases = []
    for arch in ("llama", "qwen2", "gpt2"):
        cases += [
            {"name": f"e2e {arch} dp tree, without replacement, T=1", "arch": arch, "tree": "dp",
             "sampling": {"temperature": 1.0}},
            {"name": f"e2e {arch} paths, with replacement, T=0.7 top-p 0.9", "arch": arch, "tree": "paths",
             "sampling": {"temperature": 0.7, "top_p": 0.9}},
            {"name": f"e2e {arch} dynamic, T=1.5 top-k 4", "arch": arch, "tree": "dynamic",
             "sampling": {"temperature": 1.5, "top_k": 4}},
            {"name": f"e2e {arch} eos, dp tree, T=1", "arch": arch, "tree": "dp", "eos": True,
             "sampling": {"temperature": 1.0}},
        ]
    for arch in ("llama", "qwen2"):  # the EAGLE head is a Llama decoder layer over a Llama-style target
        cases += [
            {"name": f"e2e {arch} eagle head, dp tree, T=1", "arch": arch, "tree": "dp", "eagle": True,
             "sampling": {"temperature": 1.0}},
            {"name": f"e2e {arch} eagle head, dynamic, T=0.7", "arch": arch, "tree": "dynamic", "eagle": True,
             "sampling": {"temperature": 0.7}},
        ]
    cases += [  # the drafting paths of the other issues: adaptive depth, a draft vocabulary subset, batches
        {"name": "e2e llama adaptive width 2, T=1", "arch": "llama", "tree": "adaptive", "sampling": {"temperature": 1.0}},
        {"name": "e2e qwen2 vocab subset (5 of 6), dp tree, T=1", "arch": "qwen2", "tree": "dp", "vocab": 5,
         "sampling": {"temperature": 1.0}},
        {"name": "e2e llama batch of 4 + ragged row, dp tree, T=0.7 top-p 0.9", "arch": "llama", "tree": "dp",
         "batch": 4, "sampling": {"temperature": 0.7, "top_p": 0.9}},
        {"name": "e2e qwen2 batch of 4 + ragged row, adaptive width 2, vocab subset (5 of 6), T=1", "arch": "qwen2",
         "tree": "adaptive", "vocab": 5, "batch": 4, "sampling": {"temperature": 1.0}},
        # candidates without a distribution: prompt lookup alone (no draft model) and hybrid trees
        {"name": "e2e llama prompt lookup (ngram), T=1", "arch": "llama", "tree": "ngram", "lookup": True,
         "sampling": {"temperature": 1.0}},
        {"name": "e2e qwen2 hybrid (dynamic + lookup), T=0.7 top-p 0.9", "arch": "qwen2", "tree": "hybrid", "lookup": True,
         "sampling": {"temperature": 0.7, "top_p": 0.9}},
        {"name": "e2e llama eagle head hybrid, batch of 4 + ragged row, T=1", "arch": "llama", "tree": "hybrid",
         "eagle": True, "lookup": True, "batch": 4, "sampling": {"temperature": 1.0}},
        # the same with costs: each step's trie cut to the nodes that pay, by the acceptance measured in the run so far
        {"name": "e2e llama prompt lookup cut by measured acceptance and costs, T=0.7", "arch": "llama",
         "tree": "ngram_cut", "lookup": True, "sampling": {"temperature": 0.7}},
        {"name": "e2e qwen2 hybrid with costs (model tree or trie, trie cut), T=1", "arch": "qwen2", "tree": "hybrid_cut",
         "lookup": True, "sampling": {"temperature": 1.0}},
        {"name": "e2e llama lookahead (Jacobi pool + lookup), T=1", "arch": "llama", "tree": "lookahead", "lookup": True,
         "sampling": {"temperature": 1.0}},
        # the default command's hybrid: a planned tree, merged with the trie (deterministic rule) or, on steps the trie
        # adds nothing to, drafted and verified by its own rule (sampling without replacement)
        {"name": "e2e llama hybrid on a planned tree, its own rule where lookup adds nothing, T=0.7", "arch": "llama",
         "tree": "hybrid_planned", "lookup": True, "sampling": {"temperature": 0.7}},
        {"name": "e2e llama hybrid with a lookahead window, batch of 4 + ragged row, T=0.7 top-p 0.9", "arch": "llama",
         "tree": "hybrid_lookahead", "lookup": True, "batch": 4, "sampling": {"temperature": 0.7, "top_p": 0.9}},
        # Medusa heads: every node at depth d gets head d's proposal, whatever its parent
        {"name": "e2e llama medusa heads (3), dynamic, T=1", "arch": "llama", "tree": "dynamic", "medusa": True,
         "sampling": {"temperature": 1.0}},
        {"name": "e2e qwen2 medusa heads (3), batch of 4 + ragged row, dp tree, T=0.7 top-p 0.9", "arch": "qwen2",
         "tree": "dp", "medusa": True, "batch": 4, "sampling": {"temperature": 0.7, "top_p": 0.9}},
        # drafts from the target itself: a 2-layer target drafting with one of its layers skipped
        {"name": "e2e llama layer skip (layer 1 of 2), dynamic, T=1", "arch": "llama", "tree": "dynamic",
         "skip": [1], "sampling": {"temperature": 1.0}},
        {"name": "e2e qwen2 layer skip (layer 0 of 2), batch of 4 + ragged row, dp tree, T=0.7 top-p 0.9",
         "arch": "qwen2", "tree": "dp", "skip": [0], "batch": 4, "sampling": {"temperature": 0.7, "top_p": 0.9}},
    ]
    for case in cases:
        case["level"] = "end to end"
    return cases


# a target whose rows cost a tenth of a pass each and a draft level a fifth: lookup's trie is cut and grown as its
# measured acceptance moves, and a hybrid row switches between the model's tree and the trie alone
CUT_COSTS = StepCosts({1: 1.0, 8: 1.7}, {1: 0.2})


def _tree(name: str):
    if name == "dp":
        return policies.Sequoia(**E2E_TREE)
    if name == "paths":
        return policies.Paths([(0,), (1,), (0, 0), (0, 1), (1, 0)], children="with_replacement")
    if name == "adaptive":
        return policies.Adaptive(max_depth=4, threshold=0.05, width=2)
    if name == "ngram":
        return NGram(budget=8, depth=4)
    if name == "hybrid":
        return Hybrid(policies.Dynamic(budget=5, depth=3, topk=3), ngram_budget=6, ngram_depth=4)
    if name == "ngram_cut":
        return NGram(budget=8, depth=4, costs=CUT_COSTS)
    if name == "hybrid_cut":
        return Hybrid(policies.Dynamic(budget=4, depth=3, topk=2), ngram_budget=6, ngram_depth=4, costs=CUT_COSTS)
    if name == "hybrid_planned":
        planned = policies.Sequoia(**E2E_TREE)
        return Hybrid(policies.Static(planned.shape, "deterministic"), ngram_budget=6, ngram_depth=4, costs=CUT_COSTS,
                      model_alone=planned)
    if name == "lookahead":  # 3 levels: the window's chain would fill a deeper tree, and no step could go on after it
        return Lookahead(budget=8, depth=3, window=3, ngram_size=2, prompt_lookup=True)
    if name == "hybrid_lookahead":
        return Hybrid(policies.Dynamic(budget=5, depth=3, topk=3), ngram_budget=6, ngram_depth=3, window=3,
                      ngram_size=2)
    return policies.Dynamic(budget=10, depth=3, topk=4)


def run_grid_case(case: dict, settings: dict, index: int) -> dict:
    """One row of the table (usually in a worker process; one thread, no autograd, both put back after). `settings`:
    draws, greedy_tables, runs, alpha, scale, seed and targets, as conf/certify.yaml holds them."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with torch.inference_mode():
            return _grid_case(case, settings, index)
    finally:
        torch.set_num_threads(threads)


def _grid_case(case: dict, settings: dict, index: int) -> dict:
    start = time.perf_counter()
    seed = settings["seed"] * 1000 + index
    alpha, scale = settings["alpha"], settings["scale"]
    sampling = SamplingConfig(**case["sampling"])
    events = {}
    if case["level"] == "verification":
        shape = sequoia_tree(**VERIFY_SHAPE)
        if case["mode"] == "greedy":
            verdict, counted = certify.greedy_verification(shape, VOCAB, range(seed, seed + max(1, round(
                settings["greedy_tables"] * scale))), alpha=alpha)
        else:
            tables = certify.random_tables(VOCAB, shape.levels, sampling, seed)
            draws = certify.verification_draws(shape, case["mode"], tables, max(1, round(settings["draws"] * scale)), seed)
            verdict, counted = certify.certify(draws.sequences, tables.law(), alpha), draws.events
        needed = ("depth >= 2", "non-first sibling", "full depth + bonus")
    else:
        target = certify.tiny_lm(case["arch"], seed=10, vocab=VOCAB, layers=2 if case.get("skip") else 1)
        if case.get("skip"):
            draft = skipping(target, case["skip"])
        elif case.get("eagle"):
            draft = certify.eagle_head_for(target, seed=3)
        elif case.get("medusa"):
            draft = certify.medusa_heads_for(target, seed=3)
        else:
            draft = certify.tiny_lm(case["arch"], seed=11, vocab=VOCAB)
        prompt, filler = (LOOKUP_PROMPT, LOOKUP_FILLER) if case.get("lookup") else (PROMPT, FILLER)
        if case["tree"] in ("ngram", "lookahead"):
            draft = None  # prompt lookup and lookahead draft without a model
        eos = None
        if case.get("eos"):  # a token emitted first about a quarter of the time
            first = certify.target_law(target, prompt, LENGTH, sampling).level(0)[0]
            eos = int(abs(first - 0.25).argmin())
        law = certify.target_law(target, prompt, LENGTH, sampling, eos_token_id=eos)
        vocab = None
        if case.get("vocab"):  # the draft proposes from the target's `vocab` likeliest first tokens
            vocab = vocab_subset(torch.as_tensor(law.level(0)[0] * 1e6).round(), case["vocab"])
        decode = certify.EngineDecoder(target, draft, prompt, _tree(case["tree"]), LENGTH, eos_token_id=eos,
                                       draft_vocab=vocab, batch=case.get("batch", 1), filler=filler,
                                       **case["sampling"])
        verdict = certify.run_case(decode, law, max(1, round(settings["runs"] * scale)), seed=seed * 100_000,
                                   alpha=alpha, eos_token_id=eos)
        counted = decode.events
        needed = NEEDED_E2E + (("eos",) if eos is not None else ())
    events = {k: int(v) for k, v in counted.items()}
    missing = [e for e in needed if events.get(e, 0) == 0]
    target_bias = settings["targets"][case["level"]]
    power_ok = verdict.detectable_bias <= target_bias and not missing
    return {"case": case["name"], "level": case["level"], "runs": verdict.runs, "statistic": round(verdict.statistic, 2),
            "df": verdict.df, "p_value": verdict.p_value, "impossible": verdict.impossible,
            "detectable_bias": verdict.detectable_bias, "target_bias": target_bias,
            "position_bias": list(verdict.position_bias), "tests": {k: list(v) for k, v in verdict.tests.items()},
            "events": events, "missing_events": missing, "passed": verdict.passed,
            "power_ok": power_ok, "seconds": round(time.perf_counter() - start, 1)}


def format_rows(rows: list[dict]) -> str:
    header = ("case", "runs", "statistic", "df", "p-value", "detectable bias", "result")
    lines = [header]
    for r in rows:
        bias = "exact" if r["detectable_bias"] == 0 else f"{100 * r['detectable_bias']:.1f}%"
        result = "pass" if r["passed"] else "FAIL"
        if not r["power_ok"]:
            result += " (power)" if not r["missing_events"] else f" (missing: {', '.join(r['missing_events'])})"
        lines.append((r["case"], str(r["runs"]), f"{r['statistic']:.1f}", str(r["df"]), f"{r['p_value']:.3g}", bias, result))
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(line, widths)).rstrip() for line in lines)
