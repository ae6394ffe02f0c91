"""4-bit weights: a draft's, rounded (`quantize_draft_weights`), and a target's, kept (`quantize_target_weights`).

A draft only proposes tokens: the target verifies each one against its own distribution, and the sampling modes
use the q the draft actually produced, so a draft with rounded weights changes acceptance, never the output
(treespec.decode.verify). A 0.5B-parameter draft's levels are bound by reading its weights, and 4-bit codes are a
quarter of bf16's bytes: on an AMD EPYC (2 cores, avx512_bf16, 2026-12) 24 random 4864 x 896 matrices (one MLP
projection of each Qwen2.5 0.5B layer) took 2.6 ms for one input row against 7.1 ms in bf16 on oneDNN-reordered
weights (4.7 against 7.0 for 4 rows, 8.2 against 9.3 for 8; slower for 16: 12.7 against 8.9).

Scheme (``int4``): per output row, groups of `GROUP` consecutive input weights share a scale and a zero point,
codes 0..15, asymmetric min/max rounding: w ~= (code - 8) * scale + zero. A Q4_K GGUF (the Qwen pair's) stores
4-bit codes in 32-weight sub-blocks with a scale and a minimum each: where a sub-block uses codes 0 and 15, groups
of 32 give its values back up to the rounding of scale and zero. Where treespec's kernels run (`int4_cpu`), scales
and minimums are held in fp16 (exact for Q4_0 / Q4_1 / Q5_0 / Q8_0 scales, within 2^-11 of a Q4_K / Q6_K's d * sc).
Elsewhere multiplication runs in bf16 through torch's CPU int4 kernel (`torch.ops.aten._weight_int4pack_mm_for_cpu`),
which wants the output size to be a multiple of 16; scales and zero points are held in bf16.

A target's weights cannot be rounded: its outputs are what treespec keeps. But a target loaded from a 4-bit GGUF
(the default target is a Q4_1 GGUF, dequantized when loaded) already lies on such a grid: `quantize_target_weights`
holds those layers as 4-bit codes (about a third of bf16's bytes per pass), Q8_0 tensors as 8-bit codes
(`Int8Linear`) and Q6_K / Q5_0 tensors as 6-bit codes (`Int6Linear`), and leaves the others as they are.

Scheme ``int4-a8`` (`INT8_ACTIVATIONS`): the same codes, every product on treespec's kernels taking its inputs
rounded to int8 per 32 (`set_activations`), as llama.cpp rounds its activations: another model, faster on CPUs with
AVX-512 VNNI; drafts held in 4 bits use it wherever it runs.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from treespec.errors import ConfigError
from treespec.models import int4_cpu
from treespec.models.exact import make_exact
from treespec.models.layouts import set_linear_layout

INT8_ACTIVATIONS = "int4-a8"  # the int4 scheme with every product's inputs rounded to int8 per 32 (`set_activations`)
SCHEMES = ("int4", INT8_ACTIVATIONS)
AUTO_WEIGHTS = "auto"  # a target's weights: held as 4-bit codes where hardware=auto measures that faster
GROUP = 32  # input weights per scale / zero point
ROW_BLOCK = 16  # the CPU kernel packs output rows in blocks of 16


def int4_grid(weight: torch.Tensor, group: int = GROUP) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """weight [O, I] (I a multiple of `group`) -> (codes [O, I] uint8 in 0..15, scale [O, I / group], minimum
    [O, I / group], fp32 holding fp16 values, as treespec's kernels hold them): asymmetric min/max rounding,
    weight ~= codes * scale + minimum groupwise."""
    rows, cols = weight.shape
    grouped = weight.detach().float().reshape(rows, cols // group, group)
    low, high = grouped.amin(-1, keepdim=True), grouped.amax(-1, keepdim=True)
    low = low.half().float()
    scale = ((high - low) / 15).half().float().clamp_min(2.0 ** -24)  # fp16's smallest subnormal
    codes = torch.clamp(torch.round((grouped - low) / scale), 0, 15).to(torch.uint8).reshape(rows, cols)
    return codes, scale[..., 0], low[..., 0]


def quantize_int4(weight: torch.Tensor, group: int = GROUP) -> tuple[torch.Tensor, torch.Tensor]:
    """weight [O, I] (I a multiple of `group`) -> (codes [O, I] uint8 in 0..15, scale_zero [I / group, O, 2] fp32),
    such that weight ~= (codes - 8) * scale + zero groupwise (`dequantize_int4`): torch's kernel's form."""
    codes, scale, low = int4_grid(weight, group)
    return codes, scale_zero_of(scale, low)


def scale_zero_of(scale: torch.Tensor, minimum: torch.Tensor) -> torch.Tensor:
    """scale and minimum [O, I / group] -> torch's kernel's scale_zero [I / group, O, 2] (zero = minimum + 8 scale)."""
    return torch.stack([scale, minimum + 8 * scale], -1).transpose(0, 1).contiguous()


def dequantize_int4(codes: torch.Tensor, scale_zero: torch.Tensor) -> torch.Tensor:
    """The weight [O, I] (fp32) that codes [O, I] and scale_zero [I / group, O, 2] stand for."""
    rows, cols = codes.shape
    groups = scale_zero.shape[0]
    per_group = scale_zero.float().transpose(0, 1)  # [O, I / group, 2]
    grouped = codes.float().reshape(rows, groups, cols // groups) - 8
    return (grouped * per_group[..., :1] + per_group[..., 1:]).reshape(rows, cols)


def pack_int4(codes: torch.Tensor) -> torch.Tensor:
    """codes [O, I] uint8 (O a multiple of 16) -> the CPU kernel's packed form [O, I / 2] uint8."""
    return torch.ops.aten._convert_weight_to_int4pack_for_cpu(codes.to(torch.int32).contiguous(), 1)


def int4_linear(x: torch.Tensor, packed: torch.Tensor, scale_zero: torch.Tensor, group: int,
                bias: torch.Tensor | None, out_features: int | None = None) -> torch.Tensor:
    """x [..., I] @ the dequantized weight.T (+ bias [O]) -> [..., O] in x's dtype, O = out_features (default: all
    packed rows). The product runs in bf16: the kernel's fp32 path made a Qwen2.5 0.5B pass 27-73x slower (1-16
    tokens, AMD EPYC, 2026-12)."""
    flat = x.reshape(-1, x.shape[-1])
    if flat.dtype != torch.bfloat16:
        flat = flat.to(torch.bfloat16)
    if scale_zero.dtype != torch.bfloat16:
        scale_zero = scale_zero.to(torch.bfloat16)
    out = torch.ops.aten._weight_int4pack_mm_for_cpu(flat, packed, group, scale_zero)  # [N, O'] bf16
    return _shaped_like(out, x, bias, out_features)


def _shaped_like(out: torch.Tensor, x: torch.Tensor, bias: torch.Tensor | None, out_features: int | None
                 ) -> torch.Tensor:
    """A kernel's out [N, O'] for x [..., I] -> [..., O] in x's dtype: padded rows cut (O = out_features, None: all),
    bias [O] added."""
    if out_features is not None and out.shape[-1] != out_features:
        out = out[:, :out_features]
    if out.dtype != x.dtype:
        out = out.to(x.dtype)
    if bias is not None:
        out = out + bias.to(x.dtype)
    return out.reshape(*x.shape[:-1], out.shape[-1])


class Int4Linear(torch.nn.Module):
    """A linear layer whose weight is held as 4-bit codes (`int4_grid`): `packed` for torch's kernel and, where
    treespec's kernel runs (`treespec.models.int4_cpu`), `kernel_codes`, `kernel_scale` and `kernel_minimum` for
    it (scales and minimums rounded to fp16); with `keep_codes`, `codes` too (one per byte), so that `rows`
    can slice them (the kernels' blocks of 16 rows cannot be sliced). Output rows are padded to a multiple of 16
    with zero codes and cut off after the multiplication. Which kernel a layer uses is fixed when it is built, so
    that every pass of a model multiplies the same way."""

    def __init__(self, codes: torch.Tensor | None, scale_zero: torch.Tensor, bias: torch.Tensor | None,
                 out_features: int, keep_codes: bool = True, packed: torch.Tensor | None = None,
                 kernel: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = None, activations: str = "bf16"):
        super().__init__()
        self.activations = activations  # how treespec's kernel takes the inputs (`set_activations`)
        if packed is None:
            packed = pack_int4(codes)
        self.in_features, self.out_features = packed.shape[1] * 2, out_features
        self.group = self.in_features // scale_zero.shape[0]
        self.register_buffer("codes", codes if keep_codes else None)  # [O', I] uint8, O' = O padded to 16k rows
        self.register_buffer("scale_zero", scale_zero)  # [I / group, O', 2]
        self.register_buffer("packed", packed)  # [O', I / 2] uint8
        self.register_buffer("bias", bias)  # [O] or None
        codes_k, scale_k, minimum_k = kernel if kernel is not None else (None, None, None)
        if kernel is not None:
            int4_cpu.check_layout(*kernel)
        self.register_buffer("kernel_codes", codes_k)  # [O' / 16, I / 32, 16, 16] uint8 (int4_cpu's layout)
        self.register_buffer("kernel_scale", scale_k)  # [O' / 16, I / 32, 16]: fp16 bits as int16
        self.register_buffer("kernel_minimum", minimum_k)  # [O' / 16, I / 32, 16]: fp16 bits as int16

    @property
    def kernel(self) -> str:
        """"treespec" (int4_cpu's kernel) or "torch" (torch's `_weight_int4pack_mm_for_cpu`)."""
        return "torch" if self.kernel_codes is None else "treespec"

    def product_tensors(self) -> list[torch.Tensor]:
        """The tensors a product reads (its kernel's codes, scales and zeros or minimums, the bias)."""
        held = (self.kernel_codes, self.kernel_scale, self.kernel_minimum) if self.kernel == "treespec" else (
            self.packed, self.scale_zero)
        return [t for t in (*held, self.bias) if t is not None]

    @classmethod
    def from_linear(cls, linear: torch.nn.Linear, group: int = GROUP, keep_codes: bool = True,
                    kernel: str | None = None) -> Int4Linear:
        """kernel: "treespec", "torch", or None for treespec's where it runs (`int4_cpu.kernel_name`)."""
        weight = linear.weight.detach()
        if weight.shape[1] % group:
            raise ConfigError(f"int4 weights need input sizes divisible by {group}; a layer has {weight.shape[1]}")
        return cls.from_grid(*int4_grid(weight, group), linear.bias, group, keep_codes, kernel)

    @classmethod
    def from_grid(cls, codes: torch.Tensor, scale: torch.Tensor, minimum: torch.Tensor, bias: torch.Tensor | None,
                  group: int = GROUP, keep_codes: bool = True, kernel: str | None = None) -> Int4Linear:
        """The layer of weight codes * scale + minimum: codes [O, I] uint8 in 0..15, scale and minimum [O, I / group]
        fp32 (rounded to fp16 by treespec's kernel, to bf16 by torch's), bias [O] or None."""
        out_features = codes.shape[0]
        pad = -out_features % ROW_BLOCK
        if pad:
            codes = torch.cat([codes, codes.new_zeros(pad, codes.shape[1])])
            scale, minimum = (torch.cat([t, t.new_zeros(pad, t.shape[1])]) for t in (scale, minimum))
        scale_zero = scale_zero_of(scale, minimum).to(torch.bfloat16)
        bias = None if bias is None else bias.detach().clone()
        return cls(codes, scale_zero, bias, out_features, keep_codes,
                   kernel=_kernel_tensors(codes, scale, minimum, group, kernel))

    def rows(self, index: torch.Tensor) -> Int4Linear:
        """The layer restricted to output rows `index` [S] (the same codes: a vocabulary-subset head)."""
        codes = self.codes
        if codes is None and self.kernel_codes is not None:  # treespec's kernel layout holds them too
            codes = int4_cpu.codes_from_kernel_layout(self.kernel_codes)
        if codes is None:
            raise ConfigError("this int4 layer was built without keep_codes: its rows cannot be selected")
        index = torch.as_tensor(index, dtype=torch.long, device=codes.device)
        pad = -index.numel() % ROW_BLOCK
        padded = torch.cat([index, index[-1:].expand(pad)]) if pad else index
        bias = None if self.bias is None else self.bias[index].clone()
        codes = codes[padded].contiguous()
        kernel = None
        if self.kernel_codes is not None:
            scale, minimum = (int4_cpu.from_kernel_layout(t)[padded] for t in (self.kernel_scale, self.kernel_minimum))
            kernel = int4_cpu.to_kernel_layout(codes, scale, minimum)
        return Int4Linear(codes, self.scale_zero[:, padded].contiguous(), bias, index.numel(), kernel=kernel,
                          activations=self.activations)

    def weight_fp32(self) -> torch.Tensor:
        """The weight [O, I] in fp32 that the layer multiplies by (for tests and inspection; needs keep_codes)."""
        if self.codes is None:
            raise ConfigError("this int4 layer was built without keep_codes")
        if self.kernel_codes is not None:
            scale, minimum = (int4_cpu.from_kernel_layout(t).repeat_interleave(self.group, 1)
                              for t in (self.kernel_scale, self.kernel_minimum))
            return (self.codes.float() * scale + minimum)[: self.out_features]
        return dequantize_int4(self.codes, self.scale_zero)[: self.out_features]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x [..., I] -> [..., O] in x's dtype."""
        if self.kernel_codes is None:
            return int4_linear(x, self.packed, self.scale_zero, self.group, self.bias, self.out_features)
        out = int4_cpu.int4_matmul(x.reshape(-1, x.shape[-1]), self.kernel_codes, self.kernel_scale,
                                   self.kernel_minimum, checked=True, activations=self.activations)  # [N, O'] fp32
        return _shaped_like(out, x, self.bias, self.out_features)

    def extra_repr(self) -> str:
        return (f"in_features={self.in_features}, out_features={self.out_features}, group={self.group}, int4, "
                f"kernel={self.kernel}" + (f", activations={self.activations}" if self.kernel == "treespec" else ""))


def _kernel_tensors(codes: torch.Tensor, scale: torch.Tensor, minimum: torch.Tensor, group: int, kernel: str | None):
    """treespec's kernel layout of a grid (codes [O', I], scale and minimum [O', I / group]), or None where the layer
    is to use torch's kernel: asked for, or treespec's cannot run here (or not with this group size)."""
    if kernel not in (None, "treespec", "torch"):
        raise ConfigError(f"unknown int4 kernel {kernel!r}; choose treespec or torch")
    if kernel == "torch" or group != int4_cpu.GROUP or codes.device.type != "cpu":
        return None
    why = int4_cpu.kernel_unavailable()
    if why is not None:
        if kernel == "treespec":
            raise ConfigError(f"treespec's int4 kernel cannot run here: {why}")
        return None
    return int4_cpu.to_kernel_layout(codes, scale, minimum)


def concat_int4(layers: Sequence[Int4Linear]) -> Int4Linear | None:
    """One layer whose output is the concatenation of `layers`' outputs for the same input (q/k/v, gate/up), from
    their packed rows joined; None where that does not give the same products (the kernel packs rows in blocks:
    checked on a probe input) or the layers' inputs, groups or kernels differ."""
    first = layers[0]
    if any(layer.in_features != first.in_features or layer.group != first.group or layer.kernel != first.kernel
           or layer.activations != first.activations for layer in layers):
        return None
    if any(layer.packed.shape[0] != layer.out_features for layer in layers[:-1]):  # padded rows only at the end
        return None
    biases = [layer.bias for layer in layers]
    bias = None
    if any(b is not None for b in biases):
        like = next(b for b in biases if b is not None)
        bias = torch.cat([b if b is not None else like.new_zeros(layer.out_features) for b, layer in zip(biases, layers)])
    kernel = None
    if first.kernel == "treespec":
        kernel = tuple(torch.cat([getattr(layer, name) for layer in layers])
                       for name in ("kernel_codes", "kernel_scale", "kernel_minimum"))
    joined = Int4Linear(None, torch.cat([layer.scale_zero for layer in layers], 1), bias,
                        sum(layer.out_features for layer in layers), keep_codes=False,
                        packed=torch.cat([layer.packed for layer in layers]), kernel=kernel,
                        activations=first.activations)
    probe = torch.randn(3, first.in_features, generator=torch.Generator().manual_seed(0)).to(
        device=first.packed.device, dtype=torch.bfloat16)
    if not torch.equal(joined(probe), torch.cat([layer(probe) for layer in layers], -1)):
        return None
    return joined


def int8_grid(weight: torch.Tensor, group: int = GROUP) -> tuple[torch.Tensor, torch.Tensor] | None:
    """(codes [O, I] int16 in -128..127, scale [O, I / group] fp32) with weight == codes * scale exactly (a Q8_0
    GGUF tensor as loaded: an fp16 scale per group of 32 times int8 codes, the largest magnitude 127), or None when
    the weight [O, I] is not on such a grid."""
    rows, cols = weight.shape
    if cols % group:
        return None
    grouped = weight.detach().float().reshape(rows, cols // group, group)
    scale = grouped.abs().amax(-1) / 127  # [O, I / group]
    codes = torch.round(grouped / torch.where(scale > 0, scale, torch.ones_like(scale))[..., None])
    if codes.abs().max() > 128 or not torch.equal(codes * scale[..., None], grouped):
        return None
    return codes.to(torch.int16).reshape(rows, cols), scale


class Int8Linear(torch.nn.Module):
    """A linear layer whose weight is an 8-bit grid, w = q * d with q in -128..127 and d per group of 32 (`int8_grid`),
    on treespec's kernels. Its codes and fp16 scales are held in the 8-bit kernel's layout (`int4_cpu.to_int8_layout`:
    the default target's tied Q8_0 LM head in 30 MB against fp32's 113). With int8 activations (`set_activations`)
    it multiplies on that kernel (int8_kernel.c: each group's exact integer dot product, scaled once). With bf16
    activations (the inputs rounded to bf16, as every other product then takes them) it multiplies as two 4-bit
    layers, built from the codes when first needed: q + 128 = 16 high + low (nibbles), so x @ w.T = high(x) + low(x)
    with high's weight 16 d * high - 128 d and low's d * low, both exact in the 4-bit kernel's fp32 scales and
    minimums, and the sum of the two one fp32 addition. The direct product read 30 MB against the planes' 35 for the
    default target's head and took 1.46 against 2.05 ms for one row, 2.07 against 3.19 for eight ([Intel(R) Xeon(R)
    Processor @ 2.80GHz, 2 cores; ISA: avx2 avx512f], 2026-12-07)."""

    def __init__(self, codes: torch.Tensor, scale: torch.Tensor, bias: torch.Tensor | None, out_features: int,
                 activations: str = "bf16"):
        super().__init__()
        self.activations = activations  # how the layer takes its inputs (`set_activations`)
        self.register_buffer("codes", codes)  # [O' / 16, I / 32, 512] uint8 (int4_cpu.to_int8_layout), O' = O padded
        self.register_buffer("scale", scale)  # [O' / 16, I / 32, 16]: fp16 bits as int16
        self.register_buffer("bias", bias)  # [O] or None
        self.in_features, self.out_features = codes.shape[1] * int4_cpu.GROUP, out_features
        self._planes: tuple[Int4Linear, Int4Linear] | None = None  # built for bf16 activations only

    kernel = "treespec"  # `set_activations` switches every product on treespec's kernels

    @classmethod
    def from_linear(cls, linear: torch.nn.Linear, group: int = GROUP) -> Int8Linear | None:
        """The layer on treespec's kernels, or None where the weight is not on an 8-bit grid or the kernels cannot
        run here (torch's 4-bit kernel would make two planes slower than the fp32 weight)."""
        if int4_cpu.kernel_unavailable() is not None or linear.weight.device.type != "cpu" or group != int4_cpu.GROUP:
            return None
        grid = int8_grid(linear.weight, group)
        if grid is None:
            return None
        return cls._from_codes(*grid, linear.bias)

    @classmethod
    def _from_codes(cls, codes: torch.Tensor, scale: torch.Tensor, bias: torch.Tensor | None,
                    activations: str = "bf16") -> Int8Linear:
        """codes [O, I] in -128..127, scale [O, I / 32], bias [O] or None; output rows padded to a multiple of 16 with
        zero codes."""
        out_features = codes.shape[0]
        pad = -out_features % int4_cpu.BLOCK
        if pad:
            codes = torch.cat([codes, codes.new_zeros(pad, codes.shape[1])])
            scale = torch.cat([scale, scale.new_zeros(pad, scale.shape[1])])
        bias = None if bias is None else bias.detach().clone()
        return cls(*int4_cpu.to_int8_layout(codes, scale), bias, out_features, activations)

    def grid(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(codes [O, I] int16, scale [O, I / 32] fp32): the weight is codes * scale (padded rows cut)."""
        codes, scale = int4_cpu.from_int8_layout(self.codes, self.scale)
        return codes[: self.out_features], scale[: self.out_features]

    def planes(self) -> tuple[Int4Linear, Int4Linear]:
        """The two 4-bit layers the bf16 form multiplies by (built once, on first use)."""
        if self._planes is None:
            codes, scale = self.grid()
            shifted = (codes + 128).to(torch.uint8)  # 0..255
            high = Int4Linear.from_grid(shifted >> 4, 16 * scale, -128 * scale, self.bias, GROUP, keep_codes=False,
                                        kernel="treespec")
            low = Int4Linear.from_grid(shifted & 15, scale, torch.zeros_like(scale), None, GROUP, keep_codes=False,
                                       kernel="treespec")
            self._planes = (high, low)
        return self._planes

    def product_tensors(self) -> list[torch.Tensor]:
        """The tensors a product reads in the layer's current form."""
        if self.activations == "int8":
            return [t for t in (self.codes, self.scale, self.bias) if t is not None]
        high, low = self.planes()
        return high.product_tensors() + low.product_tensors()

    def rows(self, index: torch.Tensor) -> Int8Linear:
        """The layer restricted to output rows `index` [S] (the same codes: a vocabulary-subset head)."""
        index = torch.as_tensor(index, dtype=torch.long, device=self.codes.device)
        codes, scale = self.grid()
        bias = None if self.bias is None else self.bias[index]
        return Int8Linear._from_codes(codes[index], scale[index], bias, self.activations)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x [..., I] -> [..., O] in x's dtype."""
        if self.activations != "int8":
            high, low = self.planes()
            return high(x) + low(x)
        out = int4_cpu.int8_matmul(x.reshape(-1, x.shape[-1]), self.codes, self.scale)  # [N, O'] fp32
        return _shaped_like(out, x, self.bias, self.out_features)

    def extra_repr(self) -> str:
        return (f"in_features={self.in_features}, out_features={self.out_features}, int8, activations="
                f"{self.activations}" + ("" if self.activations == "int8" else " (as two 4-bit planes)"))


INT6_ZERO = 32  # a 6-bit code c stands for c - INT6_ZERO times its group's scale


def int6_grid(weight: torch.Tensor, group: int) -> tuple[torch.Tensor, torch.Tensor] | None:
    """(codes [O, I] uint8 in 0..63, scale [O, I / group] fp32) with weight == (codes - 32) * scale exactly (a Q6_K
    GGUF tensor as loaded: 16-weight sub-blocks of integers -32..31 times d * sc, sc of either sign; a Q5_0 one:
    32-weight blocks of -16..15 times d), or None when the weight [O, I] is not on such a grid. Each group's scale is
    its largest magnitude over the largest integer (32 down to 1), of either sign, that gives every weight back
    exactly."""
    return _fit_groups(weight, group, _int6_fit)


def _fit_groups(weight: torch.Tensor, group: int, fit) -> tuple[torch.Tensor, ...] | None:
    """fit(groups [G, group] fp32) -> (codes [G, group], per-group tensors [G]...) or None, applied to weight [O, I]'s
    groups of `group` consecutive inputs, each result reshaped to [O, -1]; the first 8 rows are tried alone first,
    so that a weight off the grid is refused from them."""
    rows, cols = weight.shape
    if cols % group:
        return None
    grouped = weight.detach().float().reshape(-1, group)  # [O I / group, group]
    probe = 8 * (cols // group)
    if grouped.shape[0] > probe and fit(grouped[:probe]) is None:
        return None
    found = fit(grouped)
    return None if found is None else tuple(t.reshape(rows, -1) for t in found)


def _int6_fit(grouped: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor] | None:
    """`int6_grid` for groups [G, group]: (codes [G, group] uint8, scale [G]) or None."""
    peak = grouped.abs().amax(-1)
    scale = torch.zeros_like(peak)
    codes = torch.full(grouped.shape, INT6_ZERO, dtype=torch.uint8)
    open_groups = torch.nonzero(peak > 0)[:, 0]
    for largest in range(32, 0, -1):
        for sign in (1.0, -1.0):
            if not open_groups.numel():
                return codes, scale
            values, trial = grouped[open_groups], sign * peak[open_groups] / largest
            steps = values / trial[:, None]
            fits = ((steps == steps.round()) & (steps >= -32) & (steps <= 31)
                    & (steps * trial[:, None] == values)).all(-1)
            found = open_groups[fits]
            scale[found] = trial[fits]
            codes[found] = (steps[fits] + INT6_ZERO).to(torch.uint8)
            open_groups = open_groups[~fits]
    return None if open_groups.numel() else (codes, scale)


class Int6Linear(torch.nn.Module):
    """A linear layer whose weight is a 6-bit grid, w = (code - 32) * scale with codes 0..63 and a scale per group of
    16 or 32 inputs (`int6_grid`: a GGUF's Q6_K and Q5_0 tensors; scales held in fp16), on treespec's 6-bit kernel
    (`int4_cpu.int6_matmul`): six bits a weight and an fp16 scale per group, 7 or 6.5 bits a weight against fp32's 32.
    Its input is rounded to bf16, or to int8 (`set_activations`), as in the 4-bit products. Output rows are padded to
    a multiple of 16 (zero weights) and cut off after the multiplication."""

    def __init__(self, codes: torch.Tensor, scale: torch.Tensor, bias: torch.Tensor | None, out_features: int,
                 activations: str = "bf16"):
        super().__init__()
        self.activations = activations  # how the kernel takes the inputs (`set_activations`)
        self.out_features = out_features
        self.in_features = codes.shape[1] * 16
        self.group = self.in_features // scale.shape[1]
        self.register_buffer("kernel_codes", codes)  # [O' / 16, I / 16, 192] uint8 (int4_cpu.to_int6_layout)
        self.register_buffer("kernel_scale", scale)  # [O' / 16, I / group, 16]: fp16 bits as int16
        self.register_buffer("bias", bias)  # [O] or None

    @classmethod
    def from_grid(cls, codes: torch.Tensor, scale: torch.Tensor, bias: torch.Tensor | None,
                  activations: str = "bf16") -> Int6Linear:
        """The layer of weight (codes - 32) * scale: codes [O, I] uint8 in 0..63, scale [O, I / group] fp32."""
        out_features = codes.shape[0]
        pad = -out_features % ROW_BLOCK
        if pad:
            codes = torch.cat([codes, codes.new_full((pad, codes.shape[1]), INT6_ZERO)])
            scale = torch.cat([scale, scale.new_zeros(pad, scale.shape[1])])
        bias = None if bias is None else bias.detach().clone()
        return cls(*int4_cpu.to_int6_layout(codes, scale), bias, out_features, activations)

    @classmethod
    def from_linear(cls, linear: torch.nn.Linear) -> Int6Linear | None:
        """The layer on treespec's kernel, or None where the weight is on no 6-bit grid (groups of 32 tried first:
        fewer scales) or the kernel cannot run here."""
        if int4_cpu.kernel_unavailable() is not None or linear.weight.device.type != "cpu":
            return None
        for group in sorted(int4_cpu.INT6_GROUPS, reverse=True):
            grid = int6_grid(linear.weight, group)
            if grid is not None:
                return cls.from_grid(*grid, linear.bias)
        return None

    @property
    def kernel(self) -> str:
        """"treespec": the 6-bit kernel is treespec's alone (`Int4Linear.kernel`)."""
        return "treespec"

    def product_tensors(self) -> list[torch.Tensor]:
        return [t for t in (self.kernel_codes, self.kernel_scale, self.bias) if t is not None]

    def grid(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(codes [O, I] uint8, scale [O, I / group] fp32), the padded rows cut off."""
        codes, scale = int4_cpu.from_int6_layout(self.kernel_codes, self.kernel_scale)
        return codes[: self.out_features], scale[: self.out_features]

    def rows(self, index: torch.Tensor) -> Int6Linear:
        """The layer restricted to output rows `index` [S] (the same codes: a vocabulary-subset head)."""
        codes, scale = self.grid()
        index = torch.as_tensor(index, dtype=torch.long)
        bias = None if self.bias is None else self.bias[index]
        return Int6Linear.from_grid(codes[index].contiguous(), scale[index].contiguous(), bias, self.activations)

    def weight_fp32(self) -> torch.Tensor:
        """The weight [O, I] in fp32 that the layer multiplies by."""
        codes, scale = self.grid()
        return (codes.float() - INT6_ZERO) * scale.repeat_interleave(self.group, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x [..., I] -> [..., O] in x's dtype."""
        out = int4_cpu.int6_matmul(x.reshape(-1, x.shape[-1]), self.kernel_codes, self.kernel_scale,
                                   self.activations)  # [N, O'] fp32
        return _shaped_like(out, x, self.bias, self.out_features)

    def extra_repr(self) -> str:
        return (f"in_features={self.in_features}, out_features={self.out_features}, group={self.group}, int6, "
                f"kernel={self.kernel}, activations={self.activations}")


def int4_available(device: torch.device | str = "cpu") -> bool:
    """Whether 4-bit weights can run on `device`: a CPU with torch's int4 kernel."""
    return torch.device(device).type == "cpu" and hasattr(torch.ops.aten, "_weight_int4pack_mm_for_cpu")


def exact_int4_grid(weight: torch.Tensor, group: int = GROUP
                    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None:
    """(codes [O, I] uint8 in 0..15, scale and minimum [O, I / group] fp32) with weight == codes * scale + minimum up
    to float rounding (1e-5 of each group's span), or None when weight [O, I] lies on no such grid. A Q4_1 GGUF's
    blocks use codes 0 and 15 (min/max rounding); a Q4_K's 32-weight sub-blocks (scale d * sc, minimum -dmin * m)
    often span fewer codes (a fifth of the Qwen2.5-Coder 1.5B's), so each group's scale is its span over the largest
    step count (15 down to 1) that gives every weight back, its minimum its smallest weight."""
    return _fit_groups(weight, group, _int4_fit)


def _int4_fit(grouped: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None:
    """`exact_int4_grid` for groups [G, group]: (codes [G, group] uint8, scale [G], minimum [G]) or None."""
    low = grouped.amin(-1)
    span = grouped.amax(-1) - low
    offsets = grouped - low[:, None]
    scale = torch.where(span > 0, span / 15, torch.full_like(span, 1e-12))
    rounded = torch.round(offsets / scale[:, None])  # every group at 15 steps first (a Q4_1 block's)
    fits = (rounded * scale[:, None] - offsets).abs().amax(-1) <= 1e-5 * span
    codes = rounded.to(torch.uint8)
    open_groups = torch.nonzero(~fits)[:, 0]
    for steps in range(14, 0, -1):
        if not open_groups.numel():
            break
        trial = span[open_groups] / steps
        rounded = torch.round(offsets[open_groups] / trial[:, None])
        fits = (rounded * trial[:, None] - offsets[open_groups]).abs().amax(-1) <= 1e-5 * span[open_groups]
        found = open_groups[fits]
        scale[found] = trial[fits]
        codes[found] = rounded[fits].to(torch.uint8)
        open_groups = open_groups[~fits]
    return None if open_groups.numel() else (codes, scale, low)


def on_int4_grid(weight: torch.Tensor, group: int = GROUP) -> bool:
    """Whether weight [O, I] lies on a 4-bit grid of `group` consecutive input weights with a scale and a minimum
    each (`exact_int4_grid`: a Q4_0 / Q4_1 / Q4_K GGUF's tensors as loaded): then 4-bit codes hold it exactly."""
    return exact_int4_grid(weight, group) is not None


def holds_int4_grid(model: torch.nn.Module, probe: int = 4) -> bool:
    """Whether the first `probe` linear layers of `model` (its output layer aside) include one on a 4-bit grid: a
    target loaded from a Q4 GGUF, which `quantize_target_weights` can hold as 4-bit codes (cheap: the whole model
    is checked only when it is quantized)."""
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    linears = [m for m in model.modules() if isinstance(m, torch.nn.Linear) and m is not head][:probe]
    return any(on_int4_grid(m.weight) for m in linears)


def weight_scheme(model: torch.nn.Module) -> str | None:
    """"int4" when some linear layer of `model` is held as 4-bit (or 6-bit) codes (`INT8_ACTIVATIONS` where their
    products take int8 inputs), else None."""
    held = [m for m in model.modules() if isinstance(m, (Int4Linear, Int6Linear))]
    if not held:
        return None
    return INT8_ACTIVATIONS if any(m.activations == "int8" for m in held) else "int4"


def fully_held(model: torch.nn.Module) -> bool:
    """Whether every linear layer of `model` is held as codes (no nn.Linear left, some 4- or 6-bit layer): it then
    has no dtype or weight layout left to choose."""
    return not any(isinstance(m, torch.nn.Linear) for m in model.modules()) and any(
        isinstance(m, (Int4Linear, Int6Linear)) for m in model.modules())


def set_activations(model: torch.nn.Module, activations: str) -> torch.nn.Module:
    """Make every product of `model` on treespec's kernels take its inputs as `activations`, in place: "bf16" (each
    input rounded to bf16) or "int8" (each 32 inputs rounded to int8 codes times an fp32 scale, their amax / 127, as
    llama.cpp rounds its activations; products by int8 dot products, exact in int32). Each row is rounded on its own,
    so a row's outputs still depend on its own inputs only. A 6-bit layer whose input size is not a multiple of 32
    keeps bf16. ConfigError where the kernels have no int8 form here."""
    if activations not in int4_cpu.ACTIVATIONS:
        raise ConfigError(f"unknown activations {activations!r}; choose one of {int4_cpu.ACTIVATIONS}")
    if activations == "int8" and int4_cpu.int8_unavailable() is not None:
        raise ConfigError(f"int8 activations cannot run here: {int4_cpu.int8_unavailable()}")
    for module in model.modules():
        if isinstance(module, (Int4Linear, Int6Linear, Int8Linear)) and module.kernel == "treespec":
            module.activations = "bf16" if module.in_features % int4_cpu.GROUP else activations
    return model


def _check(scheme: str | None, model: torch.nn.Module, role: str) -> bool:
    if scheme is None:
        return False
    if scheme not in SCHEMES:
        raise ConfigError(f"unknown {role} weight scheme {scheme!r}; choose one of {SCHEMES}")
    device = next(model.parameters()).device
    if scheme == INT8_ACTIVATIONS and int4_cpu.int8_unavailable() is not None:
        raise ConfigError(f"{scheme} {role} weights need int8 activations: {int4_cpu.int8_unavailable()}")
    if not int4_available(device):
        raise ConfigError(f"int4 {role} weights run on CPUs only (torch's CPU int4 kernel); the {role} is on {device}")
    set_linear_layout(model, "standard")  # the plain weights, whatever copies a layout held
    return True


def _replace(model: torch.nn.Module, make) -> int:
    """Replace each nn.Linear `child` of `model` by make(child) where that is not None; how many were replaced."""
    replaced = 0
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if isinstance(child, torch.nn.Linear):
                new = make(child)
                if new is not None:
                    setattr(parent, name, new)
                    replaced += 1
    return replaced


def quantize_draft_weights(model: torch.nn.Module, scheme: str | None, group: int = GROUP) -> torch.nn.Module:
    """Replace every nn.Linear of `model` (the LM head included, which alone keeps its codes for vocabulary subsets)
    by its `scheme` form, in place, rounding the weights, in exact arithmetic (`treespec.models.exact`); None: as is.
    For drafts, whose weights only change what they propose: a target must keep its weights (`quantize_target_weights`)."""
    if _check(scheme, model, "draft"):
        head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
        _replace(model, lambda child: Int4Linear.from_linear(child, group, keep_codes=child is head))
        make_exact(model)
        if scheme == INT8_ACTIVATIONS:
            set_activations(model, "int8")
    return model


def held_schemes() -> tuple[str, ...]:
    """The schemes `hardware=auto` times a 4-bit-grid target in. Where the AVX-512 kernels run, both bf16 inputs
    ("int4") and, where they have them, int8 inputs ("int4-a8"): which is faster depends on the CPU
    (int8 inputs took the default target's one-token pass from 14.0 to 7.7 ms on [Intel Xeon, 2 cores; ISA: avx2
    avx512f avx512_bf16 amx_bf16], 2026-12-07, against 7.34 to 7.04 ms on [AMD EPYC, 2 cores; ISA: avx2 avx512f
    avx512_bf16], 2026-12-06), and `hardware.INT8_MARGIN` weighs what int8 inputs cost in fidelity. On the AVX2
    build int8 inputs only: its bf16 form widens every code to fp32 (on an AMD EPYC with AVX2 only, 2026-12-06, the
    default target's pass took 13-22 ms for one token against 5.6-6.1 ms with int8 activations, and 40-43 against
    19 ms for eight). bf16 inputs where no int8 form runs."""
    if int4_cpu.int8_unavailable() is not None:
        return ("int4",)
    return ("int4", INT8_ACTIVATIONS) if int4_cpu.isa()[0] == "avx512" else (INT8_ACTIVATIONS,)


def quantize_target_weights(model: torch.nn.Module, scheme: str | None, group: int = GROUP) -> torch.nn.Module:
    """Hold the linear layers of a target whose weights lie on a 4-bit grid (`exact_int4_grid`: a Q4_0 / Q4_1 / Q4_K
    GGUF's quantized tensors, dequantized when loaded) as 4-bit codes, in place; where treespec's kernel runs, those
    on an 8-bit grid (`int8_grid`: a Q8_0 tensor, such as the default target's embedding-tied LM head) as
    `Int8Linear`, and those on a 6-bit grid (`int6_grid`: a Q6_K or Q5_0 tensor) as `Int6Linear`; every other layer
    stays as it is. The model is then the same
    function of its inputs up to float rounding (the products run on bf16 inputs: this quantized target is the model
    whose outputs treespec keeps), computed in treespec's exact arithmetic (`treespec.models.exact`). None: as is.
    ConfigError when no layer lies on such a grid (4-bit codes would round the weights of another model)."""
    if _check(scheme, model, "target"):
        def held(child: torch.nn.Linear) -> Int4Linear | None:
            grid = exact_int4_grid(child.weight, group)
            return None if grid is None else Int4Linear.from_grid(*grid, child.bias, group)

        if not _replace(model, held):
            raise ConfigError("no linear layer of the target lies on a 4-bit grid: int4 target weights hold a model "
                              "quantized to 4 bits (a Q4 GGUF) as it is, and would round another one's")
        _replace(model, lambda child: Int8Linear.from_linear(child, group))
        _replace(model, Int6Linear.from_linear)
        make_exact(model)
        if scheme == INT8_ACTIVATIONS:
            set_activations(model, "int8")
    return model
