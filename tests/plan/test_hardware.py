"""hardware=auto: profiles measured on first use and cached by what they depend on; layouts and dtypes by
measurement. Nothing here assumes a particular CPU: ISA-dependent choices are forced with monkeypatch."""

import copy

import pytest
import torch
import yaml
from conftest import tiny_model

from treespec.errors import ConfigError
from treespec.models import layouts, native_pass, precision
from treespec.models.eagle_head import init_eagle_from_target
from treespec.models.layouts import HybridLinear, linear_layout, set_linear_layout
from treespec.plan import hardware
from treespec.plan.costs import LatencyProfile
from treespec.plan.hardware import auto_profile, device_identity, model_fingerprint

FAST = dict(sizes=(1, 2), repeats=1, warmup=0, prefix_len=8)


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("TREESPEC_PROFILES", str(tmp_path))
    return tmp_path


@pytest.fixture
def count_measurements(monkeypatch):
    calls = []
    original = hardware.measure_latency

    def counted(*args, **kwargs):
        calls.append(kwargs.get("sizes"))
        return original(*args, **kwargs)

    monkeypatch.setattr(hardware, "measure_latency", counted)
    return calls


def pair():
    return tiny_model("llama", seed=0), tiny_model("llama", seed=1, layers=1)


def test_measured_once_then_cached(cache_dir, count_measurements, monkeypatch):
    monkeypatch.setattr(hardware, "crossover", lambda standard, other: None)  # no hybrid (timing noise)
    monkeypatch.setattr(hardware, "packing_available", lambda: False)  # no packed layouts
    monkeypatch.setattr(hardware, "onednn_available", lambda: False)  # nor the oneDNN one (test_layouts)
    target, draft = pair()
    _, _, first = auto_profile(target, draft, **FAST)
    measured = len(count_measurements)
    assert first.origin.startswith("measured now") and measured == 2 * 2  # two layouts for each of draft and target
    assert first.profile.draft_ms[1] and first.profile.settings["machine"] == hardware.describe_device(
        device_identity(torch.device("cpu")))
    _, _, second = auto_profile(target, draft, **FAST)
    assert second.origin.startswith("cached from") and len(count_measurements) == measured
    assert second.profile.target_ms[1] == pytest.approx(first.profile.target_ms[1], abs=1e-3)
    assert (second.target_layout, second.draft_layout) == (first.target_layout, first.draft_layout)
    assert linear_layout(target) == first.target_layout
    _, _, again = auto_profile(target, draft, remeasure=True, **FAST)
    assert again.origin.startswith("measured now") and len(count_measurements) == 2 * measured


@pytest.mark.parametrize("change", ["layout", "threads", "target weights", "draft", "dtype", "draft vocab", "attention"])
def test_a_key_change_measures_again(cache_dir, count_measurements, change, monkeypatch):
    target, draft = pair()
    auto_profile(target, draft, **FAST)
    before = len(count_measurements)
    kwargs = dict(FAST)
    if change == "layout":
        kwargs["layout"] = "standard"
    elif change == "threads":
        monkeypatch.setattr(torch, "get_num_threads", lambda: 97)
    elif change == "target weights":
        with torch.no_grad():
            next(target.parameters()).add_(1.0)
    elif change == "draft":
        draft = None
    elif change == "attention":
        target.set_attn_implementation("eager")
    elif change == "draft vocab":  # a draft scoring a vocabulary subset has cheaper levels: a profile of its own
        kwargs["draft_vocab"] = torch.arange(0, 40, 2)
    else:
        monkeypatch.setattr(hardware, "fast_bf16", lambda device: False)
        kwargs["dtype"] = "auto"
    _, _, resolved = auto_profile(target, draft, **kwargs)
    assert resolved.origin.startswith("measured now") and len(count_measurements) > before
    assert auto_profile(target, draft, **kwargs)[2].origin.startswith("cached from")  # and is then cached by that key


def test_a_corrupt_cache_file_is_measured_again(cache_dir, count_measurements):
    target, draft = pair()
    auto_profile(target, draft, **FAST)
    files = list(cache_dir.glob("*.yaml"))
    assert len(files) == 1
    for garbage in ("{not yaml: [", "just a string", yaml.safe_dump({"key": "other"})):
        files[0].write_text(garbage)
        _, _, resolved = auto_profile(target, draft, **FAST)
        assert resolved.origin.startswith("measured now")
    entry = yaml.safe_load(files[0].read_text())
    entry["profile"]["target_ms"] = {2: 1.0}  # no 1-token pass: not a profile
    files[0].write_text(yaml.safe_dump(entry))
    assert auto_profile(target, draft, **FAST)[2].origin.startswith("measured now")


def test_bf16_is_measured_only_where_it_is_fast(cache_dir, monkeypatch):
    target, draft = pair()
    monkeypatch.setattr(hardware, "fast_bf16", lambda device: False)
    _, _, resolved = auto_profile(target, draft, dtype="auto", layout="standard", **FAST)
    assert {c["dtype"] for c in resolved.candidates} == {"float32"}
    monkeypatch.setattr(hardware, "fast_bf16", lambda device: True)
    target, draft, resolved = auto_profile(target, draft, dtype="auto", layout="standard", **FAST)
    assert {(c["role"], c["dtype"]) for c in resolved.candidates} == {
        (role, dtype) for role in ("target", "draft") for dtype in ("float32", "bfloat16")}
    assert str(next(target.parameters()).dtype) == f"torch.{resolved.target_dtype}"
    assert str(next(draft.parameters()).dtype) == f"torch.{resolved.draft_dtype}"


def eagle_pair():
    target = tiny_model("llama", seed=0, layers=3)
    torch.manual_seed(4)
    return target, init_eagle_from_target(target, list(range(0, 64, 2)), feature_layers=[1, 2, 3]).eval()


@pytest.mark.parametrize("layout", ["standard", "onednn"])
def test_an_eagle_heads_output_layer_is_timed_in_bf16_where_bf16_is_fast(cache_dir, monkeypatch, layout):
    """An fp32 EAGLE head is also timed with only its lm_head in bf16 (BF16_HEAD) where bf16 is fast, whatever
    dtype was asked for; the cheaper one is kept and comes back from the cache in the same precision."""
    if layout == "onednn" and not layouts.onednn_bf16_available():
        pytest.skip("oneDNN without a bf16 path on this CPU (an AVX2-only one: the bf16 variant is skipped there)")
    cheap_head = {"float32": 2.0, precision.BF16_HEAD: 1.0, precision.INT4_DRAFT: 0.9}  # int4 counts 1.25x: 1.125

    def measure(target, draft, *, sizes, draft_widths, **kwargs):
        return LatencyProfile({1: {n: 10.0 + n for n in sizes}},
                              {1: {w: cheap_head[precision.precision_name(draft)] for w in draft_widths}} if draft else {})

    monkeypatch.setattr(hardware, "measure_latency", measure)
    monkeypatch.setattr(hardware, "fast_bf16", lambda device: False)
    target, loaded = eagle_pair()
    _, head, resolved = auto_profile(target, copy.deepcopy(loaded), layout=layout, **FAST)
    assert {c["dtype"] for c in resolved.candidates if c["role"] == "draft"} <= {"float32", precision.INT4_DRAFT}
    monkeypatch.setattr(hardware, "fast_bf16", lambda device: True)
    _, head, resolved = auto_profile(target, copy.deepcopy(loaded), layout=layout, **FAST)
    c_pass = [precision.INT4_DRAFT] if native_pass.pass_identity() != "torch" else []  # where treespec's kernels build
    assert [c["dtype"] for c in resolved.candidates if c["role"] == "draft"] == ["float32", precision.BF16_HEAD, *c_pass]
    assert resolved.draft_dtype == precision.BF16_HEAD == resolved.profile.settings["draft_dtype"]
    assert head.lm_head.weight.dtype == torch.bfloat16 and head.fc.weight.dtype == torch.float32
    assert linear_layout(head) == layout and resolved.target_dtype == "float32"
    _, head, cached = auto_profile(target, copy.deepcopy(loaded), layout=layout, **FAST)  # as loaded anew
    assert cached.origin.startswith("cached from") and precision.precision_name(head) == precision.BF16_HEAD
    _, plain, resolved = auto_profile(*pair(), **FAST)  # a causal-LM draft has no such variant
    assert precision.BF16_HEAD not in {c["dtype"] for c in resolved.candidates}


def test_bf16_head_precision_is_for_eagle_heads_and_keeps_their_logits():
    target, head = eagle_pair()
    features = torch.randn(5, 32)
    with torch.no_grad():
        reference = head.reduced_logits(features)
        precision.configure(head, precision.BF16_HEAD, "standard")
        mixed = head.reduced_logits(features)
    assert mixed.dtype == torch.float32 and precision.precision_name(head) == precision.BF16_HEAD
    torch.testing.assert_close(mixed, reference, atol=0.05, rtol=0.02)  # bf16 keeps 8 bits of mantissa
    precision.configure(head, "float32", "standard")
    assert head.lm_head.weight.dtype == torch.float32 and precision.precision_name(head) == "float32"
    assert precision.body_dtype(precision.BF16_HEAD) == "float32" and precision.body_dtype("bfloat16") == "bfloat16"
    with pytest.raises(ConfigError, match="EAGLE heads"):
        precision.configure(tiny_model("llama", seed=1, layers=1), precision.BF16_HEAD, "standard")


def test_with_draft_precision_measures_a_draft_as_hardware_auto_may_run_it():
    """configs.with_draft_precision (measure_acceptance / position_agreement `draft_dtype`): the draft in a named
    precision and layout; None leaves the pair as it is; no draft is an error."""
    from treespec.app.configs import LoadedPair, with_draft_precision

    target, head = eagle_pair()
    pair = LoadedPair(target, head, None)
    assert with_draft_precision(pair, None) is pair and precision.precision_name(head) == "float32"
    mixed = with_draft_precision(pair, precision.BF16_HEAD, "transposed")
    assert mixed.draft is head and precision.precision_name(head) == precision.BF16_HEAD
    assert linear_layout(head) == "transposed" and mixed.target is target
    with pytest.raises(ConfigError, match="needs a draft"):
        with_draft_precision(LoadedPair(target, None, None), "float32")


@pytest.mark.skipif(native_pass.pass_identity() == "torch", reason="treespec's C kernels do not build here")
def test_a_4bit_head_is_kept_only_where_its_levels_pay_for_its_rounding(cache_dir, monkeypatch):
    """INT4_DRAFT counts ROUNDED_HEAD_COST times its measured levels: kept when it is cheaper by more than that, then
    back from the cache as a 4-bit head; else the best unrounded precision is kept. Converting it back is refused."""
    costs = {"float32": 2.0, precision.BF16_HEAD: 3.0}

    def measure(target, draft, *, sizes, draft_widths, **kwargs):
        return LatencyProfile({1: {n: 10.0 + n for n in sizes}},
                              {1: {w: costs[precision.precision_name(draft)] for w in draft_widths}} if draft else {})

    monkeypatch.setattr(hardware, "measure_latency", measure)
    target, loaded = eagle_pair()
    for int4_ms, kept in ((1.7, "float32"), (1.5, precision.INT4_DRAFT)):  # 1.7 x 1.25 > 2.0 > 1.5 x 1.25
        costs[precision.INT4_DRAFT] = int4_ms
        _, head, resolved = auto_profile(target, copy.deepcopy(loaded), remeasure=True, **FAST)
        assert resolved.draft_dtype == kept == precision.precision_name(head)
    _, head, cached = auto_profile(target, copy.deepcopy(loaded), **FAST)
    assert cached.origin.startswith("cached from") and precision.precision_name(head) == precision.INT4_DRAFT
    assert precision.body_dtype(precision.INT4_DRAFT) == "float32"
    with pytest.raises(ConfigError, match="4-bit"):
        precision.configure(head, "float32", "standard")


@pytest.mark.parametrize("rounds", [2, 5])
def test_the_planning_profile_gets_all_its_rounds(cache_dir, monkeypatch, rounds):
    """Where the search timed fewer than `repeats` rounds (its time cap), the chosen configuration is timed again
    without the cap, and that measurement is the profile; where it timed them all, nothing more is timed."""
    calls = []

    def measure(target, draft, *, sizes, draft_widths, max_seconds=None, repeats=5, **kwargs):
        calls.append((linear_layout(target), max_seconds))
        capped = max_seconds is not None
        target_ms = {n: 10.0 if capped else 10.0 + 5 * n for n in sizes}  # a flat t(n) from the capped rounds
        return LatencyProfile({1: target_ms}, {1: {w: 1.0 for w in draft_widths}},
                              settings={"repeats": rounds if capped else repeats})

    monkeypatch.setattr(hardware, "measure_latency", measure)
    monkeypatch.setattr(hardware, "packing_available", lambda: False)
    monkeypatch.setattr(hardware, "onednn_available", lambda: False)
    monkeypatch.setattr(hardware, "crossover", lambda standard, other: None)
    target, draft = pair()
    target, _, resolved = auto_profile(target, draft, **{**FAST, "repeats": 5, "sizes": (1, 2, 4)})
    uncapped = [layout for layout, cap in calls if cap is None]
    if rounds < 5:
        assert uncapped == [resolved.target_layout] == [linear_layout(target)]
        assert resolved.profile.target_ms[1] == {1: 15.0, 2: 20.0, 4: 30.0}
    else:
        assert uncapped == [] and resolved.profile.target_ms[1] == {1: 10.0, 2: 10.0, 4: 10.0}


def test_fingerprints_follow_the_weights_not_their_layout():
    model = tiny_model("llama", seed=0)
    before = model_fingerprint(model)
    set_linear_layout(model, "transposed")
    assert linear_layout(model) == "transposed" and model_fingerprint(model) == before
    set_linear_layout(model, "standard")
    assert linear_layout(model) == "standard" and model_fingerprint(model) == before
    assert model_fingerprint(tiny_model("llama", seed=1)) != before


def test_crossover_is_where_the_other_layout_stays_faster():
    standard = {1: 10.0, 2: 11.0, 3: 12.0, 4: 16.0, 8: 20.0, 16: 30.0}
    assert hardware.crossover(standard, {1: 10.5, 2: 12.0, 3: 12.5, 4: 14.0, 8: 19.0, 16: 28.0}) == 4
    assert hardware.crossover(standard, {1: 9.0, 2: 12.0, 3: 11.0, 4: 14.0, 8: 19.0, 16: 28.0}) == 3  # a dip at 1
    assert hardware.crossover(standard, {n: v - 1 for n, v in standard.items()}) is None  # faster everywhere
    assert hardware.crossover(standard, {n: v + 1 for n, v in standard.items()}) is None  # slower everywhere
    assert hardware.crossover(standard, {1: 11.0, 2: 10.0, 3: 13.0, 4: 17.0, 8: 19.0, 16: 31.0}) is None


@pytest.mark.parametrize("hybrid_ms", [{1: 10.0, 2: 11.0, 4: 14.0, 8: 24.0},   # the fastest
                                       {1: 10.1, 2: 11.1, 4: 15.1, 8: 25.2}])  # a little slower: noise
def test_the_hybrid_layout_is_measured_where_the_layouts_cross_and_kept(cache_dir, monkeypatch, hybrid_ms):
    """Passes faked per layout: standard is faster at 1-2 tokens, transposed from 4; the hybrid that switches at 4
    is measured as a third candidate and kept (planning faster, or within TWO_COPY_TIE of the best), and comes back
    from the cache in the same layout."""
    fake = {"standard": {1: 10.0, 2: 11.0, 4: 20.0, 8: 30.0}, "transposed": {1: 20.0, 2: 22.0, 4: 15.0, 8: 25.0},
            "hybrid:4": hybrid_ms}

    def measure(target, draft, *, sizes, draft_widths, **kwargs):
        layout = linear_layout(target)
        return LatencyProfile({1: fake[layout]}, {1: {w: 1.0 for w in draft_widths}}, settings={"layout": layout})

    monkeypatch.setattr(hardware, "measure_latency", measure)
    monkeypatch.setattr(hardware, "packing_available", lambda: False)  # the packed layouts: test_layouts
    monkeypatch.setattr(hardware, "onednn_available", lambda: False)  # and the oneDNN one
    target, draft = pair()
    accept = [0.9, 0.05]  # deep chains pay: the 4- and 8-token passes decide
    target, draft, resolved = auto_profile(target, draft, acceptance=accept, **FAST)
    scores = {c["layout"]: c["ms_per_token"] for c in resolved.candidates if c["role"] == "target"}
    assert list(scores) == ["standard", "transposed", "hybrid:4"]
    assert resolved.target_layout == linear_layout(target) == "hybrid:4" and resolved.profile.target_ms[1] == hybrid_ms
    assert scores["hybrid:4"] <= hardware.TWO_COPY_TIE * min(scores.values())
    assert (scores["hybrid:4"] == min(scores.values())) == (hybrid_ms[8] < 25.0)  # the second case: kept on the tie
    assert all(isinstance(m, HybridLinear) and m.transposed_from == 4 for m in target.modules()
               if isinstance(m, torch.nn.Linear))
    set_linear_layout(target, "standard")
    target, _, cached = auto_profile(target, draft, acceptance=accept, **FAST)
    assert cached.origin.startswith("cached from") and linear_layout(target) == "hybrid:4"


def test_layouts_keep_the_values():
    model = tiny_model("llama", seed=0)
    ids = torch.tensor([[1, 5, 9, 3]])
    with torch.no_grad():
        reference = model(ids).logits
        set_linear_layout(model, "transposed")
        assert torch.allclose(model(ids).logits, reference, atol=1e-5)
    with pytest.raises(ConfigError, match="layout"):
        set_linear_layout(model, "diagonal")
    with pytest.raises(ConfigError, match="layout"):
        auto_profile(model, None, layout="diagonal", **FAST)


def test_device_identity_names_the_cpu():
    identity = device_identity(torch.device("cpu"))
    assert identity["type"] == "cpu" and identity["name"] and isinstance(identity["isa"], list)
    assert set(identity["isa"]) <= set(hardware.ISA_FLAGS)
