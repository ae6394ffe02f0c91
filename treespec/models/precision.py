"""A model's precision and weight layout as one named configuration: what `hardware=auto` chooses between.

A precision is a dtype name ("float32", "bfloat16", "float16"), `BF16_HEAD`: an EAGLE head in fp32 whose output
layer alone (its largest matrix) is bf16, or `INT4_DRAFT`: a draft (an EAGLE head or a causal LM) whose every linear
layer is rounded to 4-bit codes (`quantize.quantize_draft_weights`), so that its decoder layers run as one C call
(treespec.models.native_pass), its products on int8 activations where the kernels have them
(`quantize.set_activations`). Drafts only propose, so a draft in any precision leaves every output's distribution
the target's. `configure(model, precision, layout)` converts a model in place (rounding cannot be undone: a 4-bit
head stays one).
"""

from __future__ import annotations

import torch

from treespec.errors import ConfigError
from treespec.models import int4_cpu
from treespec.models.eagle_head import EagleDraftModel, set_output_dtype
from treespec.models.layouts import set_linear_layout
from treespec.models.loading import dtype_name, to_dtype
from treespec.models.quantize import INT8_ACTIVATIONS, Int4Linear, fully_held, quantize_draft_weights

BF16_HEAD = "float32+bfloat16_head"  # an EAGLE head in fp32 whose output layer (lm_head) is bf16
INT4_DRAFT = "int4"  # a draft whose linear layers are 4-bit codes (norms and activations exact fp32)
HEAD_PRECISIONS = (BF16_HEAD, INT4_DRAFT)


def precision_name(model: torch.nn.Module) -> str:
    """A model's precision as `configure` names it: its parameters' dtype, `BF16_HEAD` for an fp32 EAGLE head
    whose output layer is bf16, `INT4_DRAFT` for an EAGLE head held in 4-bit codes (a causal LM in 4-bit codes keeps
    its dtype's name: a target's quantized layers are no precision of its own; `draft_precision_name`)."""
    if isinstance(model, EagleDraftModel) and isinstance(model.fc, Int4Linear):
        return INT4_DRAFT
    if isinstance(model, EagleDraftModel) and model.lm_head.weight.dtype != model.fc.weight.dtype:
        if (dtype_name(model.fc.weight.dtype), dtype_name(model.lm_head.weight.dtype)) == ("float32", "bfloat16"):
            return BF16_HEAD
        raise ConfigError(f"an EAGLE head in {model.fc.weight.dtype} with its output layer in "
                          f"{model.lm_head.weight.dtype}: only {BF16_HEAD} is a named precision")
    return dtype_name(model)


def draft_precision_name(model: torch.nn.Module) -> str:
    """A draft's precision: `precision_name`, or `INT4_DRAFT` for a causal LM whose linear layers are 4-bit codes."""
    if fully_held(model):
        return INT4_DRAFT
    return precision_name(model)


def with_precision(model: torch.nn.Module, precision: str) -> torch.nn.Module:
    """`model` (plain layout) converted in place to `precision`: a dtype name, `BF16_HEAD` (EAGLE heads) or
    `INT4_DRAFT` (drafts)."""
    if precision not in HEAD_PRECISIONS:
        if precision_name(model) == INT4_DRAFT:
            raise ConfigError(f"a draft held in 4-bit codes cannot be converted to {precision}: load it anew")
        return model.to(to_dtype(precision))
    if precision == INT4_DRAFT:  # with int8 activations where the kernels have them: a draft only proposes
        scheme = INT8_ACTIVATIONS if int4_cpu.int8_unavailable() is None else "int4"
        return quantize_draft_weights(model.to(torch.float32), scheme)
    if not isinstance(model, EagleDraftModel):
        raise ConfigError(f"{precision} is a precision for EAGLE heads, not for a {type(model).__name__}")
    return set_output_dtype(model.to(torch.float32), torch.bfloat16)


def body_dtype(precision: str) -> str:
    """The dtype of a model's activations: "float32" for `BF16_HEAD` and `INT4_DRAFT`, else `precision`."""
    return "float32" if precision in HEAD_PRECISIONS else precision


def configure(model: torch.nn.Module, precision: str, layout: str) -> torch.nn.Module:
    """`model` in `precision` (converted in place) with its linear weights stored in `layout`."""
    if precision_name(model) != precision:  # a packed copy cannot be converted: back to plain weights first
        model = with_precision(set_linear_layout(model, "standard"), precision)
    return set_linear_layout(model, layout)
