"""A model's precision and weight layout as one named configuration: what `hardware=auto` chooses between.

A precision is a dtype name ("float32", "bfloat16", "float16") or `BF16_HEAD`: an EAGLE head in fp32 whose output
layer alone (its largest matrix) is bf16. Drafts only propose, so a draft in any precision leaves every output's
distribution the target's. `configure(model, precision, layout)` converts a model in place.
"""

from __future__ import annotations

import torch

from treespec.errors import ConfigError
from treespec.models.eagle_head import EagleDraftModel, set_output_dtype
from treespec.models.layouts import set_linear_layout
from treespec.models.loading import dtype_name, to_dtype

BF16_HEAD = "float32+bfloat16_head"  # an EAGLE head in fp32 whose output layer (lm_head) is bf16


def precision_name(model: torch.nn.Module) -> str:
    """A model's precision as `configure` names it: its parameters' dtype, or `BF16_HEAD` for an fp32 EAGLE head
    whose output layer is bf16."""
    if isinstance(model, EagleDraftModel) and model.lm_head.weight.dtype != model.fc.weight.dtype:
        if (dtype_name(model.fc.weight.dtype), dtype_name(model.lm_head.weight.dtype)) == ("float32", "bfloat16"):
            return BF16_HEAD
        raise ConfigError(f"an EAGLE head in {model.fc.weight.dtype} with its output layer in "
                          f"{model.lm_head.weight.dtype}: only {BF16_HEAD} is a named precision")
    return dtype_name(model)


def with_precision(model: torch.nn.Module, precision: str) -> torch.nn.Module:
    """`model` (plain layout) converted in place to `precision`: a dtype name, or `BF16_HEAD` (EAGLE heads)."""
    if precision != BF16_HEAD:
        return model.to(to_dtype(precision))
    if not isinstance(model, EagleDraftModel):
        raise ConfigError(f"{BF16_HEAD} is a precision for EAGLE heads, not for a {type(model).__name__}")
    return set_output_dtype(model.to(torch.float32), torch.bfloat16)


def body_dtype(precision: str) -> str:
    """The dtype of everything but an EAGLE head's output layer: "float32" for `BF16_HEAD`, else `precision`."""
    return "float32" if precision == BF16_HEAD else precision


def configure(model: torch.nn.Module, precision: str, layout: str) -> torch.nn.Module:
    """`model` in `precision` (converted in place) with its linear weights stored in `layout`."""
    if precision_name(model) != precision:  # a packed copy cannot be converted: back to plain weights first
        model = with_precision(set_linear_layout(model, "standard"), precision)
    return set_linear_layout(model, layout)
