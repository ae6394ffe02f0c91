"""Exact arithmetic for 4-bit models: every reduction and transcendental in float64, rounded once to fp32.

A 4-bit product (`quantize.Int4Linear`) rounds its input to bf16, which turns a last-bit difference in that input
into a whole bf16 step whenever it straddles a rounding boundary, and a tree pass computes each value beside other
rows and masked keys, so in plain fp32 arithmetic its results differ from one-token decoding's in the last bits
(see treespec.models.attention). treespec therefore defines a 4-bit model's arithmetic so that it has one answer:
attention (`attention.exact_attention`), each RMSNorm's mean of squares and division, and the SiLU are computed in
float64 and rounded once to fp32; everything else (the rotary embedding, residual additions, the weight of a norm,
the gate times up) is one fp32 operation at a time, which any implementation computes the same. A float64 result
lies within ~1e-16 of its true value, far below fp32's step, so its fp32 rounding is the same however the sum was
ordered (unless it lies within ~1e-16 of a rounding midpoint): transformers' modules, treespec's lean pass
(treespec.models.lean) and treespec's C decoder pass (treespec.models.native_pass) give the same fp32 values.

`make_exact(model)` swaps a model's RMSNorms and SiLU activations for these (`quantize.quantize_target_weights` and
`quantize_draft_weights` call it on every model they give 4-bit layers).
"""

from __future__ import annotations

import torch


class ExactRMSNorm(torch.nn.Module):
    """RMSNorm with weight [H]: weight * fp32(x / rms(x)), the mean of squares and the division in float64."""

    def __init__(self, weight: torch.nn.Parameter, eps: float):
        super().__init__()
        self.weight = weight
        self.variance_epsilon = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return exact_rms_norm(x, self.weight, self.variance_epsilon)

    def extra_repr(self) -> str:
        return f"{tuple(self.weight.shape)}, eps={self.variance_epsilon}, float64 statistics"


class ExactSiLU(torch.nn.Module):
    """x * sigmoid(x) computed in float64, rounded once to x's dtype."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.silu(x.double()).to(x.dtype)


def exact_rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """x [..., H] -> weight * (x / rms(x) in float64, rounded to x's dtype)."""
    wide = x.double()
    normed = (wide * torch.rsqrt(wide.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype)
    return weight * normed


def _is_rms_norm(module: torch.nn.Module) -> bool:
    return (type(module).__name__.endswith("RMSNorm") and isinstance(getattr(module, "weight", None), torch.Tensor)
            and hasattr(module, "variance_epsilon"))


def _is_silu(module) -> bool:
    return type(module).__name__ in ("SiLUActivation", "SiLU")


def make_exact(model: torch.nn.Module) -> torch.nn.Module:
    """Replace `model`'s RMSNorms (transformers' `*RMSNorm` with weight and variance_epsilon) by `ExactRMSNorm` and its
    SiLU activations by `ExactSiLU`, in place (the same weight parameters); returns the model."""
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if _is_rms_norm(child):
                setattr(parent, name, ExactRMSNorm(child.weight, child.variance_epsilon))
            elif _is_silu(child):
                setattr(parent, name, ExactSiLU())
    return model

