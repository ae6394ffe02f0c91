"""treespec.load_pair: a pair tuned to this machine by default, as the command lines get it."""

import pytest

import treespec
from treespec import policies
from treespec.errors import ConfigError
from treespec.models.layouts import linear_layout
from treespec.plan.costs import StepCosts

TINY = ("tiny-random-llama", "tiny-random-llama-draft")


def test_the_pair_is_tuned_to_this_machine_by_default():
    pair = treespec.load_pair(*TINY)
    assert pair.hardware is not None and pair.hardware.name == "auto"
    assert pair.hardware.origin.startswith(("measured now", "cached from"))
    assert linear_layout(pair.target) == pair.hardware.target_layout
    assert isinstance(pair.costs, StepCosts) and pair.costs.target_cost(1) == pytest.approx(1.0)
    prompt = pair.encode("Name three rivers.")
    assert prompt and all(isinstance(t, int) for t in prompt)
    tree = policies.Hybrid(policies.Dynamic(budget=6, depth=3, topk=3), costs=pair.costs)
    out = treespec.generate(pair.target, pair.draft, prompt, tree=tree, max_new_tokens=8)
    assert out.tokens == treespec.autoregressive(pair.target, prompt, max_new_tokens=8).tokens


def test_hardware_none_keeps_the_models_as_loaded():
    pair = treespec.load_pair(*TINY, hardware="none")
    assert pair.hardware is None and pair.costs is None
    assert linear_layout(pair.target) == "standard" and linear_layout(pair.draft) == "standard"
    assert treespec.load_pair(TINY[0], None, hardware="none").draft is None


def test_a_named_profile_is_refused_with_the_way_to_use_it():
    with pytest.raises(ConfigError, match="resolve_hardware"):
        treespec.load_pair(*TINY, hardware="xeon")


def test_plans_take_the_acceptance_measured_for_the_draft_precision_chosen():
    """conf/model/smollm2.yaml: the head rounded to 4 bits (draft precision int4) accepts less than in fp32; a plan
    made for a pair whose draft runs in int4 takes that precision's figures, any other precision the model's own."""
    from pathlib import Path

    from omegaconf import OmegaConf

    from treespec.app.configs import ModelSpec, TreeSpec, acceptance_for
    from treespec.decode.sampling import SamplingConfig

    spec = OmegaConf.load(Path(__file__).parents[2] / "conf/model/smollm2.yaml")
    model = OmegaConf.merge(OmegaConf.structured(ModelSpec), spec)
    greedy, sampled = SamplingConfig(), SamplingConfig(temperature=0.7)
    own = acceptance_for(model, TreeSpec(), greedy)
    rounded = acceptance_for(model, TreeSpec(), greedy, "int4")
    assert rounded[0][0] < own[0][0] and acceptance_for(model, TreeSpec(), greedy, "float32") == own
    assert acceptance_for(model, TreeSpec(), sampled, "int4")[0][0] != acceptance_for(model, TreeSpec(), sampled)[0][0]
    assert acceptance_for(model, TreeSpec(acceptance=[0.5]), greedy, "int4") == [0.5]  # a tree's own figures win


def test_default_tree_is_the_demos_tree_planned_for_the_pair():
    """treespec.default_tree gives the API the tree `python -m treespec.generate` drafts with: conf/generate.yaml's
    tree config (the hybrid), its model part planned on the pair's profile with the acceptance of the pair's model
    config; greedy, the output is the target's own."""
    from hydra import compose, initialize_config_dir

    from treespec.app import cli
    from treespec.app.demo import GenerateSchema
    from treespec.app.session import demo_tree_spec, model_spec_for

    cli.register({"generate_schema": GenerateSchema})
    with initialize_config_dir(config_dir=str(cli.CONF_DIR), version_base=None):
        composed = compose(config_name="generate")
    assert demo_tree_spec() == cli.to_spec(type(demo_tree_spec()), composed.tree)
    pair = treespec.load_pair(*TINY)
    assert pair.names == TINY and model_spec_for(*pair.names).name == "tiny"
    tree = treespec.default_tree(pair)
    described = tree.describe()
    assert described["policy"] == demo_tree_spec().policy == "hybrid"
    assert described["model_policy"]["policy"] == "sequoia" and described["model_policy"]["hardware_aware"]
    sampled = treespec.default_tree(pair, temperature=0.7).describe()
    assert described["model_policy"]["acceptance"] == [[0.3, 0.15, 0.1, 0.05], [0.25, 0.15, 0.1, 0.05]]  # tiny.yaml
    assert sampled["model_policy"]["acceptance"] == [0.25, 0.15, 0.1, 0.05]  # its sampled figures
    prompt = pair.encode("Name three rivers.")
    out = treespec.generate(pair.target, pair.draft, prompt, tree=tree, max_new_tokens=12)
    assert out.tokens == treespec.autoregressive(pair.target, prompt, max_new_tokens=12).tokens


def test_default_tree_says_what_to_do_without_a_model_config_or_a_profile():
    pair = treespec.load_pair(*TINY, hardware="none")
    with pytest.raises(ConfigError, match="hardware"):  # the planned tree needs the machine's profile
        treespec.default_tree(pair)
    from dataclasses import replace

    with pytest.raises(ConfigError, match="no model config"):
        treespec.default_tree(replace(pair, names=("tiny-random-llama", "some/other-draft")))
    with pytest.raises(ConfigError, match="load_pair"):  # a pair assembled by hand carries no names
        treespec.default_tree(replace(pair, names=(None, None)))
