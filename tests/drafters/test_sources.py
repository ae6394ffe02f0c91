"""Prompt lookup and hybrid trees (treespec.drafters.ngram, treespec.drafters.sources): the n-gram index and trie,
greedy parity with the target alone (one row and a batch, causal-LM draft and EAGLE head), the planner's choices
between sources, a model drafter catching up on steps it did not draft, and losslessness under sampling."""

import json

import pytest
import torch
from conftest import PROMPTS, OneRow, reference, tiny_model

import treespec
from treespec import policies
from treespec.app.configs import TreeSpec, build_policy
from treespec.decode.engine import PathFeatures, StepOutcome, TargetFeatures, gather_features
from treespec.decode.sampling import SamplingConfig
from treespec.decode.tree import DraftTree, TreeShape, kary
from treespec.drafters import CausalLMDrafter, EagleDrafter, HybridDrafter, NGramDrafter, drafter_for
from treespec.drafters.ngram import NGramIndex, build_trie
from treespec.drafters.source_stats import PRIOR_STEPS, SourceStats, node_probabilities, paying_candidates
from treespec.drafters.sources import candidate_tree, step_cost
from treespec.errors import ConfigError
from treespec.eval import certify
from treespec.eval.reporting import acceptance_by_source, source_counts
from treespec.models.eagle_head import init_eagle_from_target
from treespec.plan.costs import LatencyProfile, StepCosts

REPEATING = [5, 9, 13, 2, 7, 5, 9, 13, 2, 7, 5, 9, 13]  # a text that repeats itself: lookup finds its continuation


def test_the_index_finds_continuations_longest_match_first_most_recent_first():
    index = NGramIndex([1, 4, 2, 3, 1, 4, 5, 0, 1, 4], min_ngram=1, max_ngram=3)
    found = index.continuations(depth=3, limit=10)
    assert found[:2] == [(2, (5, 0, 1)), (2, (2, 3, 1))]  # "1 4" twice, the later occurrence first
    assert all(k == 1 for k, _ in found[2:]) and (1, (5, 0, 1)) in found  # then "4" alone
    index.extend([5])
    assert index.continuations(depth=2, limit=10)[0] == (3, (0, 1))  # "1 4 5" now matches
    assert NGramIndex([3, 3, 3, 3], 1, 2).continuations(2, 10)[:2] == [(2, (3,)), (2, (3, 3))]  # up to the end


def test_the_trie_merges_shared_prefixes_within_its_budget():
    trie = build_trie(9, [(2, (5, 0, 1)), (2, (2, 3, 1)), (1, (5, 0, 7)), (1, (5, 6))], budget=20)
    assert trie.tokens[0] == 9 and trie.parents[0] == -1
    children = [i for i, p in enumerate(trie.parents) if p == 0]
    assert [trie.tokens[i] for i in children] == [5, 2]  # the longest match first, then by support
    assert len(trie.tokens) == len(set(zip(trie.parents, trie.tokens)))  # no duplicate sibling
    assert all(p < i for i, p in enumerate(trie.parents))
    small = build_trie(9, [(2, (5, 0, 1)), (2, (2, 3, 1))], budget=4)
    assert small.tokens == (9, 5, 0, 1)  # the best continuation whole before a second branch
    tree = candidate_tree(build_trie(9, [(1, (5, 3, 4))], 10), eos={3}, mode="greedy")
    assert tree.tokens.tolist() == [9, 5, 3] and tree.sources == ("", "ngram", "ngram")  # nothing below an EOS


@pytest.mark.parametrize("arch", ["llama", "qwen2", "gpt2"])
def test_prompt_lookup_needs_no_draft_and_gives_the_targets_greedy_output(arch):
    target = tiny_model(arch, seed=0)
    prompts = [*PROMPTS, REPEATING]
    for prompt in prompts:
        out = treespec.generate(target, None, prompt, tree=policies.NGram(10, 6), max_new_tokens=20)
        assert out.tokens == reference(target, prompt, 20)
    rows = treespec.generate_batch(target, None, prompts, tree=policies.NGram(10, 6), max_new_tokens=20)
    assert [r.tokens for r in rows] == [reference(target, p, 20) for p in prompts]
    self_copy = treespec.generate(target, None, REPEATING + reference(target, REPEATING, 12) + REPEATING,
                                  tree=policies.NGram(10, 6), max_new_tokens=12)
    assert self_copy.mean_accepted > 1.5 and {s for step in self_copy.steps for s in step.accepted_sources} == {"ngram"}


@pytest.mark.parametrize("kind, window", [("lm", 0), ("eagle", 0), ("lm", 3)])  # window: a lookahead pool as well
def test_hybrid_trees_give_the_targets_greedy_output_and_rows_draft_as_alone(kind, window):
    target = tiny_model("llama", seed=0)
    draft = tiny_model("llama", seed=1, layers=1) if kind == "lm" else init_eagle_from_target(target, list(range(64)))
    prompts = [*PROMPTS, REPEATING]
    for costs in (None, StepCosts({1: 1.0, 8: 1.2, 32: 3.0}, {1: 0.3})):
        tree = policies.Hybrid(policies.Dynamic(6, 4, 3), ngram_budget=8, ngram_depth=6, costs=costs, window=window,
                               ngram_size=3)
        singles = [treespec.generate(target, draft.eval(), p, tree=tree, max_new_tokens=20) for p in prompts]
        assert [s.tokens for s in singles] == [reference(target, p, 20) for p in prompts]
        rows = treespec.generate_batch(target, draft, prompts, tree=tree, max_new_tokens=20)
        assert [[s.accepted for s in r.steps] for r in rows] == [[s.accepted for s in o.steps] for o in singles]
        sampled = dict(max_new_tokens=16, temperature=0.9, seed=4)
        alone = [treespec.generate(target, draft, p, tree=tree, **{**sampled, "seed": 4 + b}).tokens
                 for b, p in enumerate(prompts)]
        assert [r.tokens for r in treespec.generate_batch(target, draft, prompts, tree=tree, **sampled)] == alone


def test_the_planner_skips_the_model_where_lookup_pays_and_merges_lookup_where_it_is_cheap():
    target, draft = tiny_model("llama", seed=0), tiny_model("llama", seed=1, layers=1)
    text = REPEATING + reference(target, REPEATING, 16)  # the target's own continuation, then the prompt again
    prompt = text + REPEATING
    dear = StepCosts({1: 1.0, 64: 1.0}, {1: 2.0})  # a draft level costs two target passes: lookup alone pays
    out = treespec.generate(target, draft, prompt, tree=policies.Hybrid(policies.Dynamic(6, 4, 3), costs=dear),
                            max_new_tokens=16)
    assert {s for step in out.steps for s in step.accepted_sources} <= {"ngram"} and out.mean_accepted > 2
    free = StepCosts({1: 1.0, 64: 1.0}, {1: 0.0})  # free passes and drafts: every source's nodes are worth adding
    out = treespec.generate(target, draft, prompt, tree=policies.Hybrid(policies.Dynamic(6, 4, 3), costs=free),
                            max_new_tokens=16)
    assert max(s.tree_size for s in out.steps) > 6  # the model's 6 nodes and lookup's
    nothing = policies.Hybrid(policies.Chain(0, children="deterministic"), costs=free)  # a model tree of one node
    out = treespec.generate(target, draft, prompt, tree=nothing, max_new_tokens=16, temperature=0.8, seed=0)
    assert {s for step in out.steps for s in step.accepted_sources} <= {"ngram"}
    assert out.tokens == treespec.generate(target, None, prompt, tree=policies.NGram(costs=free), max_new_tokens=16,
                                           temperature=0.8, seed=0).tokens  # lookup alone, step for step
    stats = SourceStats()
    assert stats.rate("ngram", 1, 0) == 0.5 and stats.model_length() == 1.0
    with pytest.raises(ConfigError, match="children=deterministic"):
        treespec.generate(target, draft, prompt, tree=policies.Hybrid(policies.Chain(2)), max_new_tokens=4,
                          temperature=1.0)


def test_a_planned_model_drafts_from_a_requests_first_step_its_prompt_read_at_no_charge():
    """Before the model has drafted, its tree counts as doing what `model_prior` says; its first draft reads the
    prompt, which a step is not charged for (a draft alone reads it in the prefill)."""
    target, draft = tiny_model("llama", seed=0), tiny_model("llama", seed=1, layers=1)
    prompt = [3, 8, 1, 12, 6, 10, 2, 14, 9, 4, 11, 7]  # no token twice: lookup has nothing to offer
    costs = StepCosts({1: 1.0, 64: 1.0}, {1: 0.5, 64: 40.0})  # the prompt, read at once, would cost 7 passes

    def first_step_sources(prior):
        out = treespec.generate(target, draft, prompt, max_new_tokens=4,
                                tree=policies.Hybrid(policies.Dynamic(6, 4, 3), costs=costs, model_prior=prior))
        return {s for depth in out.steps[0].offered_sources for s in depth}

    assert "model" in first_step_sources(3.0)  # (1 + 3) / (1 + 3 c(1)) = 1.6 tokens a pass against lookup's 1
    assert "model" not in first_step_sources(1.0)  # (1 + 1) / 2.5 = 0.8


def test_a_model_that_does_not_pay_is_probed_ever_less_often_until_it_pays():
    hybrid, stats = policies.Hybrid(policies.Dynamic(6, 4, 3), probe=2), SourceStats()

    def probes(steps, pays=lambda step: False):
        drafted = []
        for step in range(steps):
            drafted.append(hybrid._takes_model(pays(step), stats))
            stats.model_idle = 0 if drafted[-1] else stats.model_idle + 1  # as SourceStats.count keeps it
        return [step for step, took in enumerate(drafted) if took]

    taken = probes(60)
    assert [b - a for a, b in zip(taken, taken[1:])] == [5, 9, 17, 17]  # waits of 2, 4, 8, then 16 = 8 x probe
    assert probes(12, pays=lambda step: step == 0) == [0, 3, 8]  # it paid: probes every 2 idle steps again


def test_a_models_catch_up_on_the_text_it_skipped_is_priced_into_its_step():
    costs = StepCosts({1: 1.0, 8: 2.0}, {1: 0.2, 16: 0.8})
    assert step_cost(costs, 4, 2) == pytest.approx(costs.target_cost(4) + 2 * 0.2)
    assert step_cost(costs, 4, 2, catch_up=15) == pytest.approx(costs.target_cost(4) + 0.8 + 0.2)  # c(16) + c(1)
    assert step_cost(costs, 4, 0, catch_up=15) == costs.target_cost(4)  # the model does not draft: nothing to read
    draft = tiny_model("llama", seed=1, layers=1)
    hybrid = HybridDrafter(CausalLMDrafter(draft, 64), NGramDrafter(4, 1))
    with torch.no_grad():
        hybrid.reset([[3, 4, 5, 6]])
        assert hybrid.model_pending() == [3]  # the prompt before its last token
        assert hybrid.skipped_pending() == [0]  # the prompt is read once, as a draft alone reads it in the prefill
        hybrid.note_trees([], model_ran=False)
        hybrid.observe([StepOutcome((0, -7, -8), (6, 20, 21), bonus=22)])  # a step lookup drafted: absorbed
    assert hybrid.model_pending() == [6] and hybrid.skipped_pending() == [3]  # the text it skipped is priced


def test_under_sampling_a_step_lookup_adds_nothing_to_is_the_model_policys_own_tree_and_rule():
    target, draft = tiny_model("llama", seed=0), tiny_model("llama", seed=1, layers=1)
    alone = policies.Static(kary([2, 1]), "without_replacement")  # verified on its q
    merged = policies.Static(kary([2, 1]), "deterministic")
    sampled = dict(max_new_tokens=16, temperature=0.8, seed=3)
    no_lookup = policies.Hybrid(merged, ngram_budget=1, model_alone=alone)  # a trie of its root only: never a node
    twin = tiny_model("llama", seed=0)  # a draft equal to the target: its own rule accepts every first child
    for prompt in PROMPTS[:2]:
        out = treespec.generate(target, twin, prompt, tree=no_lookup, **sampled)
        assert out.tokens == treespec.generate(target, twin, prompt, tree=alone, **sampled).tokens  # step for step
    stats = SourceStats()  # the rules' measured lengths, apart
    for verify_mode, accepted in (("without_replacement", [0, 1, 2]), ("deterministic", [0])):
        stats.count(DraftTree(torch.tensor([5, 6, 7]), TreeShape((-1, 0, 1)), None, verify_mode, None,
                              ("", "model", "model")), accepted)
    # 2 nodes in 1 step, 0 in 1, 2 in 2, each with the prior of 1 node a step weighing PRIOR_STEPS steps
    assert (stats.model_length("own"), stats.model_length("deterministic"), stats.model_length()) == (
        (2 + PRIOR_STEPS) / (1 + PRIOR_STEPS), PRIOR_STEPS / (1 + PRIOR_STEPS), 1.0)
    assert stats.model_length("own", prior=3.0) == (2 + 3.0 * PRIOR_STEPS) / (1 + PRIOR_STEPS)
    for prompt in PROMPTS[:2]:  # a weak draft: the rule that measures better wins; the output is the target's either way
        assert len(treespec.generate(target, draft, prompt, tree=no_lookup, **sampled).tokens) == 16
    greedy = treespec.generate(target, draft, PROMPTS[0], tree=no_lookup, max_new_tokens=12)  # greedy: merged trees
    assert greedy.tokens == reference(target, PROMPTS[0], 12)
    text = REPEATING + reference(target, REPEATING, 16)
    free = StepCosts({1: 1.0, 64: 1.0}, {1: 0.0})  # every lookup node is worth its row: trees beyond the model's 5 nodes
    out = treespec.generate(target, draft, text + REPEATING, tree=policies.Hybrid(merged, costs=free, model_alone=alone),
                            max_new_tokens=16, temperature=0.8, seed=0)
    assert max(s.tree_size for s in out.steps) > 5
    with pytest.raises(ConfigError, match="drafts from the model"):
        policies.Hybrid(merged, model_alone=policies.NGram())


def _chain_tree(tokens, sources=None, matches=None):
    parents = tuple(range(-1, len(tokens) - 1))
    return DraftTree(torch.tensor(tokens), TreeShape(parents), None, "greedy", None,
                     sources or ("",) + ("ngram",) * (len(tokens) - 1), matches)


def test_rates_back_off_to_the_level_above_and_separate_match_lengths():
    stats = SourceStats()
    assert stats.rate("ngram", 1, 0, 4) == 0.5 and stats.rate("ngram", 7, 0, 4) == 0.5  # the prior everywhere
    long = _chain_tree([9, 1, 2], matches=(0, 4, 4))
    for _ in range(20):
        stats.count(long, [0, 1, 2])  # after a 4-token match, both levels accepted every time
    stats.count(_chain_tree([9, 5], matches=(0, 1)), [0])  # after a 1-token match, rejected
    pooled = (20 + 2 * 0.5) / (20 + 2)  # lookup's depth-1 nodes after 4-token matches, every rank: their prior
    assert stats.rate("ngram", 1, 0, 4) == pytest.approx((20 + 2 * pooled) / (20 + 2))
    assert stats.rate("ngram", 1, 2, 4) == pytest.approx(pooled)  # a rank never proposed: as that match length does
    assert stats.rate("ngram", 9, 0, 4) > 0.95  # never drafted that deep: expected to do as depth 2 did
    short = (0 + 2 * 0.5) / (1 + 2)  # after 1-token matches: one rejection
    assert stats.rate("ngram", 1, 0, 1) == pytest.approx((0 + 2 * short) / (1 + 2))  # its own cell
    assert stats.rate("ngram", 1, 0, 3) == 0.5  # a match length never proposed: the prior
    assert stats.rate("model", 1, 0) == 0.5 and stats.model_length() == 1.0  # no model node: the model did not draft
    merged = _chain_tree([9, 1, 2], sources=("", "model", "model+ngram"), matches=(0, 0, 3))
    stats.count(merged, [0, 1])
    assert stats.model_steps == 1 and stats.model_accepted == 1
    assert node_probabilities(merged, stats)[2] == pytest.approx(
        stats.rate("model", 1, 0) * max(stats.rate("model", 2, 0), stats.rate("ngram", 2, 0, 3)))


def test_a_candidate_trie_is_cut_to_the_nodes_that_pay_for_their_rows():
    tree = DraftTree(torch.tensor([9, 1, 2, 3, 7]), TreeShape((-1, 0, 1, 2, 0)), None, "greedy", (0, 1, 2, 3, 4),
                     ("",) + ("ngram",) * 4, (0, 4, 4, 4, 1))
    f = [1.0, 0.9, 0.8, 0.7, 0.1]
    free, _ = paying_candidates(tree, f, lambda n: 1.0)
    assert free.shape.size == 5  # free rows: everything
    cut, kept = paying_candidates(tree, f, lambda n: 1.0 + 0.3 * (n - 1))  # a row costs 0.3 of a pass
    assert cut.tokens.tolist() == [9, 1, 2, 3] and kept == [1.0, 0.9, 0.8, 0.7]  # the side branch (0.1) does not pay
    assert cut.shape.parents == (-1, 0, 1, 2) and cut.matches == (0, 4, 4, 4) and cut.drafter_ids == (0, 1, 2, 3)
    dear, _ = paying_candidates(tree, f, lambda n: float(n))  # rows as dear as passes: the root alone
    assert dear.shape.size == 1
    deep = paying_candidates(tree, [1.0, 0.9, 0.05, 0.04, 0.6], lambda n: 1.0 + 0.3 * (n - 1))[0]
    assert deep.tokens.tolist() == [9, 1, 7]  # by f, whatever the depth; ancestors always come along


def test_prompt_lookup_with_costs_learns_to_draft_deep_where_copies_are_accepted():
    target = tiny_model("llama", seed=0)
    costs = StepCosts({1: 1.0, 16: 2.5}, {1: 0.0})
    text = REPEATING + reference(target, REPEATING, 24)
    prompt = text + REPEATING  # the answer restates the prompt: lookup's continuations are accepted
    tree = policies.NGram(16, 16, costs=costs)
    out = treespec.generate(target, None, prompt, tree=tree, max_new_tokens=24)
    assert out.tokens == reference(target, prompt, 24)
    sizes = [s.tree_size for s in out.steps]
    assert sizes[0] < 6 and max(sizes) > 6  # the prior's small trie grows once copies are accepted
    fresh = treespec.generate(target, None, PROMPTS[0], tree=tree, max_new_tokens=12)
    assert fresh.tokens == reference(target, PROMPTS[0], 12)


def test_a_hybrid_trees_model_part_can_be_the_planned_tree():
    accept = [0.7, 0.2, 0.05]
    profile = LatencyProfile({1: {1: 4.0, 2: 4.4, 4: 5.0, 8: 6.5, 16: 11.0}}, {1: {1: 0.6, 4: 0.8, 8: 1.0}})
    choice = build_policy(TreeSpec(policy="hybrid", model_policy="sequoia"), accept, profile, "auto")
    planned = build_policy(TreeSpec(policy="sequoia"), accept, profile, "auto")
    assert choice.policy.model.shape == planned.policy.shape and choice.policy.model.children == "deterministic"
    assert choice.policy.model_alone == planned.policy  # under sampling, where lookup adds nothing: its own rule
    dynamic = build_policy(TreeSpec(policy="hybrid", model_policy="dynamic", budget=6, max_depth=3), accept, profile)
    assert dynamic.policy.model_alone is None  # a dynamic tree is verified by the deterministic rule anyway
    assert choice.policy.costs is not None and choice.info["model_tree"]["budget"] == planned.policy.shape.size
    # before the model has drafted, its tree is expected to do as planned: the planner's accepted model nodes a step
    assert choice.policy.model_prior == pytest.approx(planned.info["predicted_accepted"] - 1)
    assert choice.info["model_prior"] == pytest.approx(choice.policy.model_prior, abs=1e-4)
    assert dynamic.policy.model_prior == 1.0
    with pytest.raises(ConfigError, match="model_policy"):
        build_policy(TreeSpec(policy="hybrid", model_policy="chain"), accept, profile, "auto")
    with pytest.raises(ConfigError, match="hardware profile"):
        build_policy(TreeSpec(policy="hybrid", model_policy="sequoia"), accept, None)


def test_model_drafters_catch_up_on_steps_they_did_not_draft():
    """absorb: after steps drafted by another source, the next root's draft logits equal a fresh recomputation."""
    target = tiny_model("llama", seed=0, sharpness=1.0)
    draft = tiny_model("llama", seed=1, layers=1, sharpness=1.0)
    lm = CausalLMDrafter(draft, 64)
    with torch.no_grad():
        lm.reset([[3, 4, 5, 6]])
        lm.root_logits([6])
        lm.observe([StepOutcome((0, 1), (6, 11), bonus=12)])  # one drafted step (node 1 never forwarded)
        lm.absorb([StepOutcome((0, -7, -8), (12, 20, 21), bonus=22)])  # one step drafted by lookup
        got = lm.root_logits([22])[0]
        expected = draft(torch.tensor([[3, 4, 5, 6, 11, 12, 20, 21, 22]])).logits[0, -1]
    torch.testing.assert_close(got, expected, atol=2e-5, rtol=1e-4)
    head = init_eagle_from_target(target, list(range(64))).eval()
    eagle, fresh = OneRow(EagleDrafter(head, target, 64)), OneRow(EagleDrafter(head, target, 64))
    features = torch.randn(12, 32, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        eagle.reset([3, 4, 5, 6], features[:3])
        eagle.root_logits(6)
        eagle.drafter.absorb([StepOutcome((0, -5), (6, 11), 12, features[3:5])])
        later = TargetFeatures(target, features[None, 4:8], {}, ())  # a pass as the engine leaves it: uncomputed
        eagle.drafter.absorb([StepOutcome((0, -6), (12, 20), 21, PathFeatures(later, 0, (1, 2)))])
        got = eagle.root_logits(21)
        fresh.reset([3, 4, 5, 6, 11, 12, 20, 21], features[:7])
        expected = fresh.root_logits(21)
    torch.testing.assert_close(got, expected, atol=2e-5, rtol=1e-4)


def test_features_of_several_passes_are_computed_at_once_as_each_would_be():
    target = tiny_model("llama", seed=0)
    last_layer, generator = target.config.num_hidden_layers, torch.Generator().manual_seed(0)
    passes = [TargetFeatures(target, torch.randn(2, 5, 32, generator=generator),
                             {1: torch.randn(2, 5, 32, generator=generator)}, (1, last_layer)) for _ in range(3)]
    paths = [PathFeatures(passes[0], 1, (0, 2)), PathFeatures(passes[1], 0, (0,)), PathFeatures(passes[2], 1, (0, 3, 4))]
    assert torch.equal(gather_features(paths), torch.cat([path.tensor() for path in paths]))
    assert StepOutcome((0,), (5,), 6, paths[1]).features().shape == (1, 64)  # computed when read


def test_drafters_for_policies():
    target, draft = tiny_model("llama", seed=0), tiny_model("llama", seed=1, layers=1)
    assert isinstance(drafter_for(policies.NGram(), None, target, 64), NGramDrafter)
    assert isinstance(drafter_for(policies.Hybrid(policies.Dynamic(6, 4, 3)), draft, target, 64), HybridDrafter)
    assert drafter_for(policies.Chain(0), draft, target, 64) is None
    with pytest.raises(ConfigError, match="needs a draft model"):
        treespec.generate(target, None, [1, 2], tree=policies.Hybrid(policies.Dynamic(6, 4, 3)), max_new_tokens=4)
    with pytest.raises(ConfigError, match="model policy"):
        policies.Hybrid(policies.NGram())


# --- losslessness: the exact law of the first tokens (treespec.eval.certify's fast tier) ---------------------

V, L, RUNS = 6, 4, 2500
LOOKUP_PROMPT = [1, 4, 2, 3, 1, 4, 5, 0, 1, 4]  # "1 4" recurs with two continuations: a branching trie


@pytest.mark.parametrize("name, sampling", [("ngram", SamplingConfig(1.0)), ("hybrid", SamplingConfig(0.7, top_p=0.9))])
def test_first_tokens_follow_the_target(name, sampling):
    target, draft = certify.tiny_lm("llama", seed=10, vocab=V), certify.tiny_lm("llama", seed=11, vocab=V)
    tree = (policies.NGram(8, 4) if name == "ngram" else
            policies.Hybrid(policies.Dynamic(5, 3, 3), ngram_budget=6, ngram_depth=4))
    law = certify.target_law(target, LOOKUP_PROMPT, L, sampling)
    decode = certify.EngineDecoder(target, draft if name == "hybrid" else None, LOOKUP_PROMPT, tree, L,
                                   temperature=sampling.temperature, top_p=sampling.top_p)
    verdict = certify.run_case(decode, law, RUNS)
    assert verdict.passed, verdict
    assert decode.events["non-first sibling"] >= 0.01 * RUNS and decode.events["depth >= 2"] >= 0.01 * RUNS
    assert verdict.detectable_bias < 0.25


def test_acceptance_by_source_counts_what_each_source_offered_and_got_accepted_at_each_depth():
    target, draft = tiny_model("llama", seed=0), tiny_model("llama", seed=1, layers=1)
    tree = policies.Hybrid(policies.Dynamic(6, 4, 3), ngram_budget=8, ngram_depth=6)
    outs = [treespec.generate(target, draft, p, tree=tree, max_new_tokens=24) for p in [*PROMPTS, REPEATING]]
    counts = source_counts(outs)
    assert set(counts) <= {"model", "ngram", "model+ngram"} and counts
    for depth in range(1, 5):  # every accepted draft at depth d was offered there, by exactly one source label
        accepted = sum(by_depth.get(depth, [0, 0])[1] for by_depth in counts.values())
        assert accepted == sum(1 for o in outs for s in o.steps if len(s.accepted_sources) >= depth)
    assert all(a <= o for by_depth in counts.values() for o, a in by_depth.values())
    offered = sum(o for by_depth in counts.values() for d, (o, _) in by_depth.items() if d == 1)
    assert offered == sum(len(s.offered_sources[0]) for o in outs for s in o.steps if s.offered_sources)
    table = acceptance_by_source([counts, json.loads(json.dumps(counts))])  # summed, as from JSON rows
    first = {s: rows[0] for s, rows in table.items()}
    assert all(r["depth"] == 1 and r["offered"] == 2 * counts[s][1][0] for s, r in first.items() if 1 in counts[s])
    assert not source_counts([treespec.generate(target, draft, PROMPTS[0], tree=policies.Chain(k=2),
                                                max_new_tokens=8)])  # a single source: nothing to split
