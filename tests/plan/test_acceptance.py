"""Acceptance measurement: counting rules, spine trees, and real decoding on tiny models."""

import pytest
from conftest import tiny_model

from treespec.api import Generation, StepStats
from treespec.errors import ConfigError
from treespec.plan.acceptance import AcceptanceProfile, count_outcomes, measure_acceptance, spine_tree


def _gen(*steps):
    stats = [StepStats(tree_size=9, tree_depth=levels, accepted=len(r) + 1, accepted_ranks=r, draft_s=0, target_s=0,
                       verify_s=0, commit_s=0) for levels, r in steps]
    return Generation([0] * sum(s.accepted for s in stats), stats, 3, "max_new_tokens", 0.0, 1.0)


def test_spine_tree_shape():
    tree = spine_tree(3, 2)
    assert tree.size == 7 and tree.levels == 3
    assert tree.children[0] == (1, 2, 3) and tree.children[1] == (4, 5, 6)
    assert spine_tree(4, 1).size == 5
    with pytest.raises(ConfigError):
        spine_tree(0, 1)


def test_count_outcomes_by_depth():
    generation = _gen(
        (3, ()),  # nothing accepted: depth-1 observation, none accepted
        (3, (0, 1)),  # rank 0 at depth 1, rank 1 at depth 2
        (3, (2,)),  # rank 2 at depth 1; depth 2 not reached along the spine
        (3, (0,)),  # rank 0 at depth 1, none at depth 2
        (2, (1,)),  # tree cut to 2 levels: depth-2 not observable
        (3, (0, 0)),  # last step of the generation: skipped
    )
    counts, observed = count_outcomes([generation], width=3, depth=2)
    assert observed.tolist() == [5, 2]
    assert counts.tolist() == [[2, 1, 1], [0, 1, 0]]


def test_self_draft_accepts_rank_one_always(tmp_path):
    target = tiny_model("llama", seed=0)
    profile = measure_acceptance(target, target, [[1, 2, 3], [9, 8]], width=4, depth=2, max_new_tokens=20)
    assert profile.vector == [1.0, 0.0, 0.0, 0.0]
    assert profile.matrix[1] == [1.0, 0.0, 0.0, 0.0]
    assert profile.settings["prompts"] == 2
    profile.to_yaml(tmp_path / "a.yaml")
    assert AcceptanceProfile.from_yaml(tmp_path / "a.yaml") == profile


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_random_draft_gives_a_sub_stochastic_profile(temperature):
    target, draft = tiny_model("llama", seed=0), tiny_model("llama", seed=1, layers=1)
    profile = measure_acceptance(target, draft, [[1, 2, 3], [4, 5, 6, 7]], width=6, depth=3, max_new_tokens=24,
                                 temperature=temperature, seed=1)
    assert len(profile.vector) == 6 and len(profile.matrix) == 3
    for row in profile.matrix:
        assert all(p >= 0 for p in row) and sum(row) <= 1 + 1e-9
    assert profile.observations[0] >= profile.observations[1] >= profile.observations[2]
    assert profile.observations[0] > 0


def test_bad_profile_file(tmp_path):
    path = tmp_path / "x.yaml"
    path.write_text("vector: [0.5]\n")
    with pytest.raises(ConfigError, match="acceptance profile"):
        AcceptanceProfile.from_yaml(path)
