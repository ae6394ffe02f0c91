"""The certificate harness (treespec.certify), fast tier: its power statement is calibrated, the engine's
verify routine passes at the verification level in every mode, and a subtle mutation of every mode is
rejected (the controls that prove the power). `make certify` runs the full grid."""

from collections import Counter

import numpy as np
import pytest
import torch

import treespec.decode.verify
from treespec.decode.sampling import SamplingConfig, sample, uniform
from treespec.decode.verify import VerifyResult, _normalise
from treespec.eval import certify, certify_grid
from treespec.plan.optimizer import sequoia_tree

V = 6
SHAPE = sequoia_tree([0.5, 0.2, 0.1, 0.05], budget=10, max_depth=4)  # irregular, 4 levels: L = 4
DRAWS = 30_000  # detectable bias ~6.7% at level 1e-3; make certify uses 400k (<= 2%)
ALPHA = 1e-3


def test_the_tree_is_irregular_and_deep():
    assert SHAPE.levels == 4 and len({len(k) for k in SHAPE.children}) >= 3


def _law_with_first_row(row):
    law = certify.random_tables(V, 3, SamplingConfig(1.0), seed=1).law()
    rows = law.rows.copy()
    rows[0] = row
    return certify.SequenceLaw(rows, law.length)


def test_power_statement_is_calibrated():
    """A bias of exactly the stated size on a token of probability 0.2 is caught about 90% of the time,
    and the exact law passes."""
    law = _law_with_first_row([0.2, 0.3, 0.1, 0.15, 0.15, 0.1])
    runs = 20_000
    bias = certify.certify(certify.sample_law(law, runs, 0), law, ALPHA).detectable_bias
    assert bias == pytest.approx(certify.detectable_bias(runs, V - 1, ALPHA / 4), rel=1e-9)
    caught = [not certify.certify(certify.sample_law(certify.biased_law(law, bias, 0), runs, s), law, ALPHA).passed
              for s in range(40)]
    exact = [certify.certify(certify.sample_law(law, runs, 100 + s), law, ALPHA).passed for s in range(20)]
    assert 0.75 <= np.mean(caught) and all(exact)
    assert certify.detectable_bias(4 * runs, V - 1, ALPHA) == pytest.approx(certify.detectable_bias(runs, V - 1, ALPHA) / 2)


def test_impossible_sequences_fail_and_laws_are_exact():
    law = certify.random_tables(V, 3, SamplingConfig(1.0, top_k=2), seed=2).law()
    assert law.joint().sum() == pytest.approx(1.0)
    sequences = certify.sample_law(law, 500, 0)
    assert certify.certify(sequences, law).passed
    impossible = int(np.flatnonzero(law.level(0)[0] == 0)[0])
    sequences[0, 0] = impossible
    verdict = certify.certify(sequences, law)
    assert verdict.impossible == 1 and not verdict.passed


def test_holm():
    assert certify.holm([0.01, 0.04, 0.03]) == pytest.approx([0.03, 0.06, 0.06])


def test_target_law_matches_the_model_and_eos_ends_sequences():
    model = certify.tiny_lm("llama", seed=0, vocab=V)
    sampling = SamplingConfig(0.8, top_p=0.9)
    law = certify.target_law(model, [1, 2], 3, sampling, eos_token_id=4)
    assert law.symbols == V + 1 and law.joint().sum() == pytest.approx(1.0)
    with torch.no_grad():
        from treespec.decode.sampling import probabilities

        expected = probabilities(model(torch.tensor([[1, 2, 3, 0]])).logits[0, -1], sampling).double().numpy()
    code = certify._offsets(V + 1, 3)[2] + 3 * (V + 1) + 0
    np.testing.assert_allclose(law.rows[code, :V], expected / expected.sum(), atol=1e-6)
    after_eos = certify._offsets(V + 1, 3)[1] + 4
    assert law.rows[after_eos, V] == 1.0
    padded = certify.pad_runs([(3, 4), (4,), (1, 2, 3)], law, eos_token_id=4)
    assert padded.tolist() == [[3, 4, V], [4, V, V], [1, 2, 3]]
    with pytest.raises(ValueError, match="did not end in EOS"):
        certify.pad_runs([(1, 2)], law, eos_token_id=4)


# ------------------------------------------------------------------------------------ verification level


CORRECT = [
    ("without_replacement", SamplingConfig(1.0)),
    ("with_replacement", SamplingConfig(0.7, top_p=0.9)),
    ("deterministic", SamplingConfig(1.5, top_k=4)),
]


@pytest.mark.parametrize("mode, sampling", CORRECT, ids=[m for m, _ in CORRECT])
def test_verify_passes_at_the_verification_level(mode, sampling):
    tables = certify.random_tables(V, SHAPE.levels, sampling, seed=3)
    draws = certify.verification_draws(SHAPE, mode, tables, DRAWS, seed=4)
    verdict = certify.certify(draws.sequences, tables.law(), ALPHA)
    assert verdict.passed, verdict
    # the draws exercise deep paths, non-first siblings and the bonus after a full-depth acceptance
    for event in ("depth >= 2", "non-first sibling", "full depth + bonus"):
        assert draws.events[event] >= 0.02 * DRAWS, (event, draws.events)


def test_greedy_verification_is_exact():
    verdict, events = certify.greedy_verification(SHAPE, V, range(300))
    assert verdict.passed and verdict.impossible == 0
    assert min(events["depth >= 2"], events["non-first sibling"], events["full depth + bonus"]) >= 10, events


def _keep(new, old):
    return old / old.sum() if new is None else new


def mutated_choose_child(mutation: str):
    """A copy of treespec.decode.verify._choose_child with one deliberate, subtle mistake."""

    def choose(p_v, q_v, kids, tokens, mode, generator):
        residual = p_v.double()
        draft = q_v.double().clone() if mode in ("without_replacement", "with_replacement") else None
        first_residual = (residual - draft).clamp_min(0) if draft is not None else None
        rejected = torch.zeros_like(residual, dtype=torch.bool)
        scale = 1.05 if mutation == "acceptance ratio x1.05" else 1.0
        for i, child in enumerate(kids):
            x = tokens[child]
            r = uniform(generator)
            if mode == "deterministic":
                if r < scale * residual[x]:
                    return child, residual
                residual = residual.clone()
                if mutation != "rejected token keeps its mass":
                    residual[x] = 0
                if not (mutation == "residual not renormalised after one sibling" and i == 0):
                    residual = _normalise(residual)
                continue
            d_x = draft[x]
            if r * d_x < scale * residual[x] or d_x <= 0 < residual[x]:
                return child, residual
            if mutation == "residual from p each time, not cumulative":
                residual = _normalise(first_residual.clone())
            elif mutation == "residual not renormalised after one sibling" and i == 0:
                residual = (residual - draft).clamp_min(0)
            else:
                residual = _keep(_normalise((residual - draft).clamp_min(0)), residual)
            if mode == "without_replacement":
                rejected[x] = True
                if not (mutation == "draft forgets one removal" and i == 0):
                    draft[x] = 0
                draft = _normalise(draft)
                if draft is None:
                    draft = _normalise((~rejected).double())
        return None, residual

    return choose


def mutated_verify_leaf_bonus_from_parent(tokens, children, target_probs, draft_probs, mode, generator=None):
    """A copy of treespec.decode.verify.verify whose bonus after a full-depth acceptance (at a leaf) is drawn from
    the parent's row instead of the leaf's."""
    node, path = 0, [0]
    while True:
        kids = children[node]
        if not kids:
            row = target_probs[path[-2]] if len(path) > 1 else target_probs[node]
            return VerifyResult(tuple(path), sample(row.double(), generator))
        nxt, residual = treespec.decode.verify._choose_child(target_probs[node], draft_probs[node], kids, tokens, mode,
                                                      generator)
        if nxt is None:
            return VerifyResult(tuple(path), sample(residual, generator))
        path.append(nxt)
        node = nxt


MUTANTS = [
    ("without_replacement", "acceptance ratio x1.05"),
    ("without_replacement", "residual not renormalised after one sibling"),
    ("without_replacement", "draft forgets one removal"),
    ("with_replacement", "acceptance ratio x1.05"),
    ("with_replacement", "residual not renormalised after one sibling"),
    ("with_replacement", "residual from p each time, not cumulative"),
    ("deterministic", "acceptance ratio x1.05"),
    ("deterministic", "residual not renormalised after one sibling"),
    ("deterministic", "rejected token keeps its mass"),
]


@pytest.mark.parametrize("mode, mutation", MUTANTS, ids=[f"{m}: {x}" for m, x in MUTANTS])
def test_a_subtle_mutation_is_rejected(monkeypatch, mode, mutation):
    monkeypatch.setattr(treespec.decode.verify, "_choose_child", mutated_choose_child(mutation))
    tables = certify.random_tables(V, SHAPE.levels, SamplingConfig(1.0), seed=3)
    draws = certify.verification_draws(SHAPE, mode, tables, DRAWS, seed=4)
    verdict = certify.certify(draws.sequences, tables.law(), ALPHA)
    assert not verdict.passed and verdict.p_value < ALPHA / 10, verdict


@pytest.mark.parametrize("mode", ["without_replacement", "deterministic"])
def test_a_wrong_bonus_after_full_depth_is_rejected(monkeypatch, mode):
    monkeypatch.setattr(treespec.decode.verify, "verify", mutated_verify_leaf_bonus_from_parent)
    tables = certify.random_tables(V, SHAPE.levels, SamplingConfig(1.0), seed=3)
    draws = certify.verification_draws(SHAPE, mode, tables, DRAWS, seed=4)
    assert not certify.certify(draws.sequences, tables.law(), ALPHA).passed


def test_greedy_mutation_is_rejected(monkeypatch):
    """Greedy: a walk that accepts the first child whenever the argmax is not among the children."""
    real = treespec.decode.verify.verify

    def sloppy(tokens, children, target_probs, draft_probs, mode, generator=None):
        result = real(tokens, children, target_probs, draft_probs, mode, generator)
        kids = children[result.accepted[-1]]
        if kids and len(result.accepted) == 1:
            return VerifyResult((0, kids[0]), int(target_probs[kids[0]].argmax()))
        return result

    monkeypatch.setattr(treespec.decode.verify, "verify", sloppy)
    verdict, _ = certify.greedy_verification(SHAPE, V, range(100))
    assert verdict.impossible > 0 and not verdict.passed


def test_a_decoder_plugs_in():
    """Any decoding path is a callable seeds -> token sequences; here a perfect sampler of the law."""
    law = certify.random_tables(V, 3, SamplingConfig(1.0), seed=5).law()

    def decode(seeds):
        return [tuple(certify.sample_law(law, 1, int(s))[0]) for s in seeds]

    verdict = certify.run_case(decode, law, 3000)
    assert verdict.passed and verdict.runs == 3000 and len(verdict.position_bias) == 3
    assert Counter(len(s) for s in decode(range(5))) == {3: 5}


NEWER_DRAFTERS = ("lookup", "skip", "medusa")


@pytest.mark.parametrize("name", [c["name"] for c in certify_grid.end_to_end_cases()
                                  if any(c.get(k) for k in NEWER_DRAFTERS)])
def test_the_grids_newer_drafter_cases_run_and_pass_at_a_small_scale(name):
    """`make certify`'s prompt-lookup, lookahead, hybrid, Medusa and layer-skip cases, at a fiftieth of their runs
    (their power is the full run's)."""
    case = next(c for c in certify_grid.end_to_end_cases() if c["name"] == name)
    settings = {"seed": 0, "alpha": 1e-3, "scale": 1 / 50, "runs": 14_500, "draws": 0, "greedy_tables": 0,
                "targets": {"verification": 0.02, "end to end": 0.10}}
    row = certify_grid.run_grid_case(case, settings, index=7)
    assert row["passed"] and row["runs"] == 290 and row["impossible"] == 0
    assert row["events"].get("non-first sibling", 0) > 0, row["events"]
