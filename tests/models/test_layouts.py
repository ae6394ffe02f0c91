"""Weight layouts (treespec.layouts): every layout keeps the model's values, two-copy layouts dispatch by row count,
the packed and oneDNN layouts' guards (MKL or oneDNN, dtype, memory budget), and auto_profile's choice among them
(timings faked)."""

import pytest
import torch
from conftest import tiny_model

import treespec
from treespec import policies
from treespec.errors import ConfigError
from treespec.models import layouts
from treespec.models.layouts import HybridLinear, OneDNNLinear, PackedLinear, extra_bytes, linear_layout, set_linear_layout
from treespec.plan import hardware
from treespec.plan.costs import LatencyProfile

needs_mkl = pytest.mark.skipif(not layouts.packing_available(), reason="this torch build has no MKL")
needs_onednn = pytest.mark.skipif(not layouts.onednn_available(), reason="this torch build has no oneDNN")
FAST = dict(sizes=(1, 2), repeats=1, warmup=0, prefix_len=8)


def count_f_linear(monkeypatch) -> list[bool]:
    """Patch F.linear to record, per call, whether its weight was contiguous (the standard layout)."""
    used = []
    original = torch.nn.functional.linear
    monkeypatch.setattr(torch.nn.functional, "linear", lambda x, w, b=None: used.append(w.is_contiguous()) or original(x, w, b))
    return used


def test_hybrid_linear_uses_the_transposed_copy_from_its_threshold(monkeypatch):
    model = tiny_model("llama", seed=0)
    ids = torch.tensor([[1, 5, 9, 3, 7]])
    with torch.no_grad():
        reference = [model(ids[:, :n]).logits for n in (1, 3, 5)]
        set_linear_layout(model, "hybrid:3")
        head = model.get_output_embeddings()
        assert isinstance(head, HybridLinear) and head.weight.is_contiguous() and head.weight_t.is_contiguous()
        assert torch.equal(head.weight_t.t(), head.weight) and "weight_t" not in model.state_dict()
        used = count_f_linear(monkeypatch)
        for n, expected in zip((1, 3, 5), reference):
            used.clear()
            torch.testing.assert_close(model(ids[:, :n]).logits, expected, atol=1e-5, rtol=1e-5)
            assert used and set(used) == {n < 3}  # the standard (contiguous) weights below 3 rows, then the copy
    set_linear_layout(model, "standard")
    assert linear_layout(model) == "standard" and not any(isinstance(m, HybridLinear) for m in model.modules())
    for bad in ("hybrid", "hybrid:1", "hybrid:x", "diagonal"):
        with pytest.raises(ConfigError, match="layout"):
            set_linear_layout(model, bad)



@needs_mkl
def test_packed_linear_multiplies_the_packed_copy_from_its_threshold(monkeypatch):
    model = tiny_model("llama", seed=0)
    ids = torch.tensor([[1, 5, 9, 3, 7]])
    with torch.no_grad():
        reference = [model(ids[:, :n]).logits for n in (1, 3, 5)]
        set_linear_layout(model, "packed:3")
        head = model.get_output_embeddings()
        assert isinstance(head, PackedLinear) and head.packed_from == 3 and linear_layout(model) == "packed:3"
        assert "weight_packed" not in model.state_dict() and extra_bytes(model) > 0
        used = count_f_linear(monkeypatch)
        for n, expected in zip((1, 3, 5), reference):
            used.clear()
            torch.testing.assert_close(model(ids[:, :n]).logits, expected, atol=1e-5, rtol=1e-5)
            assert bool(used) == (n < 3)  # F.linear below 3 rows; MKL's packed GEMM from 3 (no F.linear at all)
    assert linear_layout(set_linear_layout(model, "packed")) == "packed:1"
    set_linear_layout(model, "hybrid:2")  # straight from one two-copy layout to the other
    assert linear_layout(model) == "hybrid:2" and not any(isinstance(m, PackedLinear) for m in model.modules())
    set_linear_layout(model, "standard")
    assert linear_layout(model) == "standard" and extra_bytes(model) == 0
    for bad in ("packed:0", "packed:x", "packed:", "packing"):
        with pytest.raises(ConfigError, match="layout"):
            set_linear_layout(model, bad)


@pytest.mark.parametrize("target_layout, draft_layout", [("packed:2", "standard"), ("onednn", "onednn")])
def test_greedy_parity_with_two_copy_layouts(target_layout, draft_layout):
    """With MKL-packed or oneDNN-reordered weights, trees (one sequence and a batch) decode exactly as transformers'
    greedy decoding of the same target, one token per pass."""
    available = layouts.packing_available() if target_layout.startswith("packed") else layouts.onednn_available()
    if not available:
        pytest.skip(f"this torch build cannot hold the {target_layout} layout")
    target, draft = tiny_model("llama", seed=0), tiny_model("llama", seed=1, layers=1)
    set_linear_layout(target, target_layout), set_linear_layout(draft, draft_layout)
    prompt = [3, 17, 5, 9]
    out = target.generate(torch.tensor([prompt]), attention_mask=torch.ones(1, 4, dtype=torch.long), max_new_tokens=20,
                          do_sample=False, pad_token_id=0)
    expected = out[0, 4:].tolist()
    for tree in (policies.Chain(4), policies.KAry([3, 2]), policies.Dynamic(budget=8, depth=4, topk=2)):
        assert treespec.generate(target, draft, prompt, tree=tree, max_new_tokens=20).tokens == expected
    batch = treespec.generate_batch(target, draft, [prompt, [42, 7]], tree=policies.Chain(3).shape, max_new_tokens=20)
    assert batch[0].tokens == expected


@needs_mkl
def test_the_packed_layout_refuses_what_it_cannot_hold(monkeypatch):
    model = tiny_model("llama", seed=0)
    with pytest.raises(ConfigError, match="GB"):
        set_linear_layout(model, "packed:4", max_extra_bytes=1)
    assert linear_layout(model) == "standard"  # undone
    set_linear_layout(model, "packed:4", max_extra_bytes=10**9)
    model = hardware.configure(model, "bfloat16", "standard")  # back to plain weights, then converted
    assert next(model.parameters()).dtype == torch.bfloat16
    with pytest.raises(ConfigError, match="fp32"):
        set_linear_layout(model, "packed")
    monkeypatch.setattr(layouts, "packing_available", lambda: False)
    with pytest.raises(ConfigError, match="MKL"):
        set_linear_layout(tiny_model("llama", seed=0), "packed")


@needs_onednn
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_onednn_linear_keeps_the_values_at_every_row_count(monkeypatch, dtype):
    """Every linear layer multiplies through the reordered copy (F.linear is never called), single sequences and
    batches alike; the logits match the standard layout's to float rounding; the copy is not part of the state."""
    if dtype == torch.bfloat16 and not layouts.onednn_bf16_available():
        pytest.skip("oneDNN has no bf16 path on this CPU (test_onednn_layout_guards)")
    model = tiny_model("llama", seed=0).to(dtype)
    ids = torch.tensor([[1, 5, 9, 3, 7], [2, 4, 6, 8, 10]])
    tolerance = dict(atol=1e-5, rtol=1e-5) if dtype == torch.float32 else dict(atol=5e-2, rtol=2e-2)
    with torch.no_grad():
        reference = {n: model(ids[:, :n]).logits for n in (1, 3, 5)}
        set_linear_layout(model, "onednn")
        assert all(isinstance(m, OneDNNLinear) for m in model.modules() if isinstance(m, torch.nn.Linear))
        assert linear_layout(model) == "onednn" and "weight_onednn" not in str(list(model.state_dict()))
        assert extra_bytes(model) == sum(m.weight.numel() * m.weight.element_size() for m in model.modules()
                                         if isinstance(m, torch.nn.Linear))
        used = count_f_linear(monkeypatch)
        for n, expected in reference.items():
            torch.testing.assert_close(model(ids[:, :n]).logits, expected, **tolerance)
            torch.testing.assert_close(model(ids[1:, :n]).logits, expected[1:], **tolerance)
        assert used == []
    set_linear_layout(model, "hybrid:2")  # from one two-copy layout to another: the reordered copy is dropped
    assert linear_layout(model) == "hybrid:2" and not any(isinstance(m, OneDNNLinear) for m in model.modules())
    set_linear_layout(model, "standard")
    assert extra_bytes(model) == 0 and layouts.parse_layout("onednn") == ("onednn", None, None)


def test_onednn_layout_guards(monkeypatch):
    if layouts.onednn_available():
        with pytest.raises(ConfigError, match="fp32 or bf16"):
            set_linear_layout(tiny_model("llama", seed=0).half(), "onednn")
        monkeypatch.setattr(layouts, "onednn_bf16_available", lambda: False)  # an AVX2-only CPU
        model = tiny_model("llama", seed=0).to(torch.bfloat16)
        with pytest.raises(ConfigError, match="bf16 path"):
            set_linear_layout(model, "onednn")
        assert linear_layout(model) == "standard"
        assert linear_layout(set_linear_layout(tiny_model("llama", seed=0), "onednn")) == "onednn"  # fp32 still can
    monkeypatch.setattr(layouts, "onednn_available", lambda: False)
    with pytest.raises(ConfigError, match="oneDNN"):
        set_linear_layout(tiny_model("llama", seed=0), "onednn")
    for bad in ("onednn:4", "oneDNN"):
        with pytest.raises(ConfigError, match="layout"):
            layouts.parse_layout(bad)


def fake_profiles(monkeypatch, fake, draft_fake=None, onednn=False):
    """auto_profile's measurements replaced by `fake[layout]` target timings and `draft_fake[layout]` draft level
    timings (1.0 ms at every width without it); the oneDNN layout is measured only with `onednn`."""
    def measure(target, draft, *, sizes, draft_widths, **kwargs):
        if sizes == (1,) and draft_fake is not None:  # a draft candidate (timed with sizes (1,))
            return LatencyProfile({1: {1: 10.0}}, {1: {w: draft_fake[linear_layout(draft)] for w in draft_widths}})
        layout = linear_layout(target)
        return LatencyProfile({1: fake[layout]}, {1: {w: 1.0 for w in draft_widths}}, settings={"layout": layout})

    monkeypatch.setattr(hardware, "measure_latency", measure)
    monkeypatch.setattr(hardware, "packing_available", lambda: True)
    monkeypatch.setattr(hardware, "onednn_available", lambda: onednn)


@needs_mkl
def test_auto_measures_packed_weights_and_their_crossover(tmp_path, monkeypatch):
    """Standard fastest at 1-2 tokens, packed from 4, transposed nowhere: packed:1 and the packed:4 that switches at
    the crossover are measured, packed:4 is kept, and the progress count ends at its total."""
    monkeypatch.setenv("TREESPEC_PROFILES", str(tmp_path))
    fake_profiles(monkeypatch, {"standard": {1: 10.0, 2: 11.0, 4: 20.0, 8: 30.0},
                                "transposed": {1: 12.0, 2: 13.0, 4: 22.0, 8: 32.0},
                                "packed:1": {1: 10.5, 2: 11.5, 4: 14.5, 8: 19.0},
                                "packed:4": {1: 10.0, 2: 11.0, 4: 14.0, 8: 18.0}})
    ticks = []
    target, draft = tiny_model("llama", seed=0), tiny_model("llama", seed=1, layers=1)
    target, _, resolved = auto_profile_with(target, draft, ticks)
    layouts_measured = [c["layout"] for c in resolved.candidates if c["role"] == "target"]
    assert layouts_measured == ["standard", "transposed", "packed:1", "packed:4"]
    assert resolved.target_layout == linear_layout(target) == "packed:4"
    assert all(isinstance(m, PackedLinear) for m in target.modules() if isinstance(m, torch.nn.Linear))
    assert resolved.profile.settings["layout_extra_mb"] == round(extra_bytes(target) / 1e6, 1)
    assert ticks[-1][1] == ticks[-1][2]  # done == total


@needs_mkl
def test_auto_skips_packed_weights_that_do_not_fit(tmp_path, monkeypatch):
    monkeypatch.setenv("TREESPEC_PROFILES", str(tmp_path))
    fake_profiles(monkeypatch, {"standard": {1: 10.0, 2: 11.0, 4: 20.0, 8: 30.0},
                                "transposed": {1: 12.0, 2: 13.0, 4: 22.0, 8: 32.0}})
    monkeypatch.setattr(hardware, "_memory_budget", lambda: 16)  # 16 bytes: no packed copy fits
    ticks = []
    target, _, resolved = auto_profile_with(tiny_model("llama", seed=0), None, ticks)
    assert [c["layout"] for c in resolved.candidates] == ["standard", "transposed"]
    assert resolved.target_layout == linear_layout(target) == "standard"
    assert any("packed: skipped" in what for what, _, _ in ticks) and ticks[-1][1] == ticks[-1][2]


def test_auto_measures_onednn_weights_for_both_models_and_keeps_them_where_fastest(tmp_path, monkeypatch):
    """With oneDNN available, the oneDNN layout is a candidate for the draft and for the target (after the plain and
    two-copy ones) and is kept for each where it is fastest; the cache brings the models back in it."""
    monkeypatch.setenv("TREESPEC_PROFILES", str(tmp_path))
    monkeypatch.setattr(layouts, "onednn_available", lambda: True)
    monkeypatch.setattr(layouts, "_make_onednn", lambda module: fake_onednn(module))
    fake_profiles(monkeypatch, {"standard": {1: 10.0, 2: 14.0, 4: 20.0, 8: 30.0},
                                "transposed": {1: 12.0, 2: 13.0, 4: 22.0, 8: 32.0},
                                "packed:1": {1: 9.5, 2: 12.5, 4: 15.0, 8: 20.0},
                                "onednn": {1: 6.0, 2: 6.2, 4: 6.5, 8: 8.0}},
                  draft_fake={"standard": 2.0, "transposed": 1.5, "onednn": 1.0}, onednn=True)
    ticks = []
    target, draft = tiny_model("llama", seed=0), tiny_model("llama", seed=1, layers=1)
    target, draft, resolved = auto_profile_with(target, draft, ticks)
    measured = [(c["role"], c["layout"]) for c in resolved.candidates]
    assert measured == [("draft", "standard"), ("draft", "transposed"), ("draft", "onednn"), ("target", "standard"),
                        ("target", "transposed"), ("target", "packed:1"), ("target", "onednn")]
    assert (resolved.target_layout, resolved.draft_layout) == ("onednn", "onednn")
    assert linear_layout(target) == linear_layout(draft) == "onednn" and ticks[-1][1] == ticks[-1][2]
    set_linear_layout(target, "standard"), set_linear_layout(draft, "standard")
    target, draft, cached = hardware.auto_profile(target, draft, acceptance=(0.9, 0.05), **FAST)
    assert cached.origin.startswith("cached from") and linear_layout(target) == linear_layout(draft) == "onednn"


def test_auto_skips_onednn_weights_that_do_not_fit(tmp_path, monkeypatch):
    """Where the reordered copies pass half the memory available, the oneDNN layout is skipped for both models (the
    progress bar says so and still ends at its total) and the models are left in a measured layout."""
    monkeypatch.setenv("TREESPEC_PROFILES", str(tmp_path))
    monkeypatch.setattr(layouts, "onednn_available", lambda: True)
    monkeypatch.setattr(layouts, "_make_onednn", lambda module: fake_onednn(module))
    monkeypatch.setattr(hardware, "_memory_budget", lambda: 16)  # 16 bytes: no copy fits
    fake_profiles(monkeypatch, {"standard": {1: 10.0, 2: 11.0, 4: 20.0, 8: 30.0},
                                "transposed": {1: 12.0, 2: 13.0, 4: 22.0, 8: 32.0}},
                  draft_fake={"standard": 2.0, "transposed": 1.5}, onednn=True)
    ticks = []
    target, draft, resolved = auto_profile_with(tiny_model("llama", seed=0), tiny_model("llama", seed=1, layers=1), ticks)
    assert "onednn" not in {c["layout"] for c in resolved.candidates}
    assert [what for what, _, _ in ticks if "onednn: skipped" in what] == [
        "draft float32 onednn: skipped (layout onednn needs more than 0.00 GB for its second copies of the weights)",
        "target float32 onednn: skipped (layout onednn needs more than 0.00 GB for its second copies of the weights)"]
    assert (linear_layout(target), linear_layout(draft)) == ("standard", "transposed") and ticks[-1][1] == ticks[-1][2]


def fake_onednn(module):
    """A OneDNNLinear whose 'reordered copy' is a plain clone: for the choice logic on builds without oneDNN."""
    layouts._make_plain(module)
    module.__dict__["weight_onednn"] = module.weight.data.clone()
    module.__class__ = OneDNNLinear
    return module.weight.numel() * module.weight.element_size()


def auto_profile_with(target, draft, ticks, acceptance=(0.9, 0.05)):
    return hardware.auto_profile(target, draft, acceptance=acceptance,
                                 progress=lambda what, done, total: ticks.append((what, done, total)), **FAST)


def test_a_packed_window_serves_only_its_row_counts(monkeypatch):
    assert layouts.parse_layout("packed:4-16") == ("packed", 4, 16) and layouts.parse_layout("packed") == ("packed", 1, None)
    assert layouts.parse_layout("hybrid:4") == ("hybrid", 4, None)
    for bad in ("packed:4-3", "packed:4-", "hybrid:4-8"):
        with pytest.raises(ConfigError, match="layout"):
            layouts.parse_layout(bad)
    if not layouts.packing_available():
        return
    model = tiny_model("llama", seed=0)
    set_linear_layout(model, "packed:2-3")
    assert linear_layout(model) == "packed:2-3"
    used = count_f_linear(monkeypatch)
    with torch.no_grad():
        for n in (1, 2, 3, 4):
            used.clear()
            model(torch.arange(1, n + 1)[None])
            assert bool(used) == (n not in (2, 3)), n


def test_faster_window_is_the_longest_run_where_the_other_layout_was_faster():
    standard = {1: 10.0, 2: 11.0, 3: 12.0, 4: 16.0, 8: 20.0, 16: 30.0, 32: 40.0}
    window = hardware.faster_window
    assert window(standard, {1: 11.0, 2: 12.0, 3: 13.0, 4: 14.0, 8: 18.0, 16: 31.0, 32: 45.0}) == (4, 8)
    assert window(standard, {1: 11.0, 2: 12.0, 3: 13.0, 4: 14.0, 8: 18.0, 16: 29.0, 32: 39.0}) == (4, None)
    assert window(standard, {1: 9.0, 2: 12.0, 3: 13.0, 4: 14.0, 8: 18.0, 16: 29.0, 32: 41.0}) == (4, 16)  # 1 alone: shorter
    assert window(standard, {n: v - 1 for n, v in standard.items()}) == (1, None)
    assert window(standard, standard) is None  # ties are not faster


def test_two_copy_ties_do_not_chain(tmp_path, monkeypatch):
    """Without acceptance the 1-token pass decides: hybrid:4 within 2% of standard, packed:1 within 2% of hybrid:4
    but not of standard: hybrid:4 is kept."""
    monkeypatch.setenv("TREESPEC_PROFILES", str(tmp_path))
    fake_profiles(monkeypatch, {"standard": {1: 10.0, 2: 11.0, 4: 20.0, 8: 30.0},
                                "transposed": {1: 20.0, 2: 22.0, 4: 19.0, 8: 29.0},
                                "hybrid:4": {1: 10.15, 2: 11.15, 4: 20.2, 8: 30.3},
                                "packed:1": {1: 10.35, 2: 11.4, 4: 20.7, 8: 31.0}})
    ticks = []
    _, _, resolved = auto_profile_with(tiny_model("llama", seed=0), None, ticks, acceptance=None)
    scores = {c["layout"]: c["ms_per_token"] for c in resolved.candidates}
    assert list(scores) == ["standard", "transposed", "hybrid:4", "packed:1"]
    assert scores["hybrid:4"] <= hardware.TWO_COPY_TIE * scores["standard"] < scores["packed:1"]
    assert scores["packed:1"] <= hardware.TWO_COPY_TIE * scores["hybrid:4"] and resolved.target_layout == "hybrid:4"
