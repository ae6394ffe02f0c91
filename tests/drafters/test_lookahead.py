"""Lookahead decoding (treespec.drafters.lookahead, `Lookahead` and `Hybrid(window=...)` in treespec.drafters.sources):
the Jacobi window's moves and the pool it fills, candidate tries with their sources, greedy parity with the target
alone (one row, a batch, with prompt lookup, inside hybrid trees), the window's rows priced by the profile, and
losslessness under sampling."""

import pytest
from conftest import PROMPTS, reference, tiny_model

import treespec
from treespec import policies
from treespec.decode.engine import decode
from treespec.decode.sampling import SamplingConfig
from treespec.drafters import HybridDrafter, LookaheadDrafter, drafter_for
from treespec.drafters.lookahead import JacobiRow
from treespec.drafters.ngram import NGramIndex, build_trie, graft
from treespec.errors import ConfigError
from treespec.eval import certify
from treespec.plan.costs import StepCosts

REPEATING = [5, 9, 13, 2, 7, 5, 9, 13, 2, 7, 5, 9, 13]


def test_the_window_moves_with_the_emitted_tokens_and_its_diagonals_fill_the_pool():
    text = NGramIndex([1, 2, 3], 1, 4)
    row = JacobiRow(text, window=3, ngram=3, pool_size=2)
    assert row.window == [3, 3, 3] and row.trails == [(), (), ()]  # nothing follows the root yet: it repeats
    row.window, row.trails = [4, 5, 6], [(9,), (), (8,)]
    text.extend([4, 10])  # the step accepted g_1 = 4 and emitted the bonus 10: two tokens
    row.update([10, 11, 12], emitted=2, text=text)
    assert row.pool == {9: [(4, 10)], 8: [(6, 12)]}  # only the diagonals of N = 3 tokens
    assert row.window == [11, 12, 12] and row.trails == [(5,), (6,), ()]  # y_2, y_3 moved up; one slot refilled
    row.add((9, 7, 7))
    row.add((9, 4, 10))  # seen again: the most recent first, at most pool_size per first token
    row.add((9, 1, 1))
    assert row.pool[9] == [(1, 1), (4, 10)]
    row.update([None, None, None], emitted=1, text=text)  # the window was not in the tree: guesses refilled
    assert len(row.window) == 3 and row.pool[9] == [(1, 1), (4, 10)]


def test_candidate_tries_name_their_sources_and_the_window_is_grafted_onto_them():
    trie = build_trie(9, [(1, (5, 3), "lookahead"), (2, (5, 4)), (1, (6,), "lookahead")], budget=10)
    assert trie.tokens == (9, 5, 6, 4, 3) and trie.sources == ("", "lookahead+ngram", "lookahead", "ngram", "lookahead")
    grafted = graft(trie, [5, 7, 8], "jacobi")
    assert grafted.tokens == (9, 5, 6, 4, 3, 7, 8) and grafted.parents == (-1, 0, 0, 1, 1, 1, 5)
    assert grafted.sources[1] == "jacobi+lookahead+ngram" and grafted.sources[5:] == ("jacobi", "jacobi")
    assert graft(build_trie(9, [], 1), [], "jacobi").tokens == (9,)


@pytest.mark.parametrize("arch", ["llama", "qwen2"])
def test_lookahead_needs_no_draft_and_gives_the_targets_greedy_output(arch):
    target = tiny_model(arch, seed=0)
    prompts = [*PROMPTS, REPEATING]
    for tree in (policies.Lookahead(budget=8, depth=5, window=4, ngram_size=3),
                 policies.Lookahead(budget=8, depth=5, window=3, ngram_size=2, prompt_lookup=True,
                                    costs=StepCosts({1: 1.0, 8: 1.2, 32: 3.0}, {1: 0.0}))):
        singles = [treespec.generate(target, None, p, tree=tree, max_new_tokens=24) for p in prompts]
        assert [s.tokens for s in singles] == [reference(target, p, 24) for p in prompts]
        rows = treespec.generate_batch(target, None, prompts, tree=tree, max_new_tokens=24)
        assert [[s.accepted for s in r.steps] for r in rows] == [[s.accepted for s in o.steps] for o in singles]
        sources = {s for o in singles for step in o.steps for a in step.accepted_sources for s in a.split("+")}
        assert sources & {"lookahead", "jacobi"}  # the tiny target repeats itself: its guesses get accepted
        assert sum(o.mean_accepted for o in singles) / len(singles) > 1.2


def test_hybrid_trees_take_a_lookahead_window_as_a_third_source():  # greedy parity: test_sources.py
    target, draft = tiny_model("llama", seed=0), tiny_model("llama", seed=1, layers=1)
    tree = policies.Hybrid(policies.Dynamic(6, 4, 3), ngram_budget=8, ngram_depth=6, window=3, ngram_size=3)
    assert isinstance(drafter_for(tree, draft, target, 64).ngram, LookaheadDrafter)
    out = treespec.generate(target, draft, REPEATING, tree=tree, max_new_tokens=24)
    assert out.tokens == reference(target, REPEATING, 24)
    assert max(s.tree_size for s in out.steps) > 6  # the model's nodes, lookup's and the window's
    assert tree.describe()["window"] == 3 and "window" not in policies.Hybrid(policies.Dynamic(6, 4, 3)).describe()


def _window_steps(target, costs, probe, steps=24):
    drafter = LookaheadDrafter(window=4, ngram=3)
    policy = policies.Lookahead(budget=6, depth=5, window=4, ngram_size=3, probe=probe, costs=costs)
    out = decode(target, drafter, [PROMPTS[2]], policy=policy, sampling=SamplingConfig(0.0), max_new_tokens=steps,
                 generators=[None], eos=frozenset())[0]
    assert out.tokens == reference(target, PROMPTS[2], steps)
    return drafter, out


def test_the_windows_rows_join_a_tree_only_where_they_pay_and_are_probed_when_they_do_not():
    target = tiny_model("llama", seed=0)
    free, out = _window_steps(target, StepCosts({1: 1.0, 64: 1.0}, {1: 0.0}), probe=8)
    assert free.jacobi[0].window_steps == len(out.steps) - 1  # free rows: every tree but the last (one level left)
    dear, out = _window_steps(target, StepCosts({1: 1.0, 2: 50.0, 64: 500.0}, {1: 0.0}), probe=5)  # a row: 49 passes
    assert 2 <= dear.jacobi[0].window_steps <= len(out.steps) // 6 + 1  # the first step, then only every 6th: probes
    assert dear.jacobi[0].window_gain <= dear.jacobi[0].window_tokens


def test_lookahead_asks_the_engine_for_the_targets_greedy_tokens_only_when_it_drafts_with_a_window():
    target = tiny_model("llama", seed=0)
    assert drafter_for(policies.Lookahead(), None, target, 64).wants_target_argmax
    assert not getattr(drafter_for(policies.NGram(), None, target, 64), "wants_target_argmax", False)
    hybrid = drafter_for(policies.Hybrid(policies.Dynamic(6, 4, 3)), tiny_model("llama", seed=1, layers=1), target, 64)
    assert isinstance(hybrid, HybridDrafter) and not hybrid.wants_target_argmax
    with pytest.raises(ConfigError, match="window >= 1"):
        LookaheadDrafter(window=0)
    with pytest.raises(ConfigError, match="probe"):
        policies.Lookahead(probe=0)


V, L, RUNS = 6, 4, 2500
LOOKUP_PROMPT = [1, 4, 2, 3, 1, 4, 5, 0, 1, 4]


@pytest.mark.parametrize("hybrid, sampling", [(False, SamplingConfig(1.0)), (True, SamplingConfig(0.7, top_p=0.9))])
def test_first_tokens_follow_the_target(hybrid, sampling):
    target, draft = certify.tiny_lm("llama", seed=10, vocab=V), certify.tiny_lm("llama", seed=11, vocab=V)
    tree = (policies.Hybrid(policies.Dynamic(5, 3, 3), ngram_budget=6, ngram_depth=3, window=3, ngram_size=2)
            if hybrid else policies.Lookahead(budget=8, depth=3, window=3, ngram_size=2, prompt_lookup=True))
    law = certify.target_law(target, LOOKUP_PROMPT, L, sampling)
    decoder = certify.EngineDecoder(target, draft if hybrid else None, LOOKUP_PROMPT, tree, L,
                                    temperature=sampling.temperature, top_p=sampling.top_p)
    verdict = certify.run_case(decoder, law, RUNS)
    assert verdict.passed, verdict
    assert decoder.events["non-first sibling"] >= 0.01 * RUNS and decoder.events["depth >= 2"] >= 0.01 * RUNS
    assert decoder.events["full depth + bonus, then more"] > 0
    assert verdict.detectable_bias < 0.25
