"""The bandwidth bound: the bytes a 1-token pass reads, and the measured read bandwidth."""

import pytest
from conftest import tiny_model

from treespec.models.layouts import onednn_available, set_linear_layout
from treespec.models.quantize import quantize_draft_weights
from treespec.plan.bandwidth import bandwidth_bound_ms, memory_bandwidth, pass_bytes


def test_a_pass_reads_every_weight_but_the_input_embedding_and_the_cache():
    model = tiny_model("llama", layers=2, hidden=32, vocab=64)
    params = sum(p.numel() for p in model.parameters())
    read = pass_bytes(model, prefix_len=10)
    buffers = sum(b.numel() * b.element_size() for b in model.buffers())  # the rotary frequencies
    assert read.weights == 4 * (params - 64 * 32) + buffers
    assert read.kv_cache == 2 * 2 * 2 * 8 * 10 * 4 and read.total == read.weights + read.kv_cache  # 2 kv heads of 8


def test_tied_embeddings_are_read_as_the_lm_head_and_second_copies_are_not_counted():
    model = tiny_model("llama", layers=1, hidden=32, vocab=64)
    model.lm_head.weight = model.model.embed_tokens.weight  # tied: one tensor, read once, by the head
    tied = pass_bytes(model, 0).weights
    buffers = sum(b.numel() * b.element_size() for b in model.buffers())
    assert tied == 4 * sum(p.numel() for p in model.parameters()) + buffers
    for layout in ("hybrid:4", "packed:1", "onednn"):  # a second copy of every linear weight: read once
        if layout == "onednn" and not onednn_available():
            continue
        set_linear_layout(model, layout)
        assert pass_bytes(model, 0).weights == tied, layout
        set_linear_layout(model, "standard")


def test_four_bit_weights_read_fewer_bytes():
    model = tiny_model("llama", layers=2, hidden=64, vocab=64)
    before = pass_bytes(model, 0).weights
    assert pass_bytes(quantize_draft_weights(model, "int4"), 0).weights < before / 2


def test_bandwidth_is_measured_and_bounds_a_pass():
    bandwidth = memory_bandwidth(megabytes=64, repeats=2)
    assert 0.1 < bandwidth < 10_000
    model = tiny_model("llama")
    assert bandwidth_bound_ms(model, 16, bandwidth) == pytest.approx(pass_bytes(model, 16).total / bandwidth / 1e6)
