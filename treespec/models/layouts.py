"""How a model's linear weights are stored for the CPU's GEMM kernels: `set_linear_layout(model, layout)`.

A tree pass multiplies every weight matrix by 1-64 rows (tree tokens times batch rows), where GEMM libraries
switch kernels and the storage of the right-hand matrix decides which one runs. The layouts (values are never
changed; results differ from the standard layout by float rounding, as between any two GEMM kernels):

* ``standard``: contiguous [out, in], as loaded;
* ``transposed``: the transpose of a contiguous [in, out] (`transpose_linear_storage`);
* ``hybrid:<rows>``: both (`HybridLinear`): inputs of at least <rows> rows use the transposed copy;
* ``packed:<rows>`` or ``packed:<rows>-<last>`` (``packed`` = ``packed:1``): the standard weight plus a copy
  packed once for MKL's GEMM (`PackedLinear`, fp32 on CPUs with MKL): inputs of <rows> to <last> rows (no
  upper limit without one) multiply through `cblas_sgemm_compute` on the packed copy, which skips the
  per-call packing of the weight that makes MKL's 4-16-row GEMMs slow; others through `F.linear`;
* ``onednn``: the standard weight plus a copy reordered once into oneDNN's blocked format (`OneDNNLinear`, fp32
  or bf16 on CPUs whose torch has oneDNN): every input multiplies through oneDNN's inner-product kernel on it,
  which on an AMD EPYC (2026-12) was faster than MKL at every row count, 1 to 64.

Which one is fastest depends on the CPU: `treespec.plan.hardware.auto_profile` measures them. The two-copy
layouts cost memory (`extra_bytes`): MKL pads its packed copies (about 2x a large matrix, up to 20x a small
one), so `set_linear_layout` takes a `max_extra_bytes` budget.
"""

from __future__ import annotations

import functools

import torch

from treespec.errors import ConfigError

LAYOUTS = ("standard", "transposed")  # the plain layouts
HYBRID = "hybrid"  # "hybrid:<rows>": standard and transposed (`HybridLinear`)
PACKED = "packed"  # "packed:<rows>": standard and MKL-packed (`PackedLinear`)
ONEDNN = "onednn"  # standard and reordered for oneDNN (`OneDNNLinear`)
PACK_ROWS = 4  # the row count MKL and oneDNN pack for; fastest at 1-16 rows with this (Xeon 2026-11, EPYC 2026-12)


def transpose_linear_storage(model: torch.nn.Module) -> torch.nn.Module:
    """Store every nn.Linear weight [out, in] as the transpose of a contiguous [in, out] tensor.

    The values and the module API are unchanged; only the memory layout differs. `F.linear` then hands
    MKL a non-transposed right-hand matrix, which its small-M GEMM paths (M = 2..16 rows, the tree sizes
    of speculative decoding on a CPU) run faster. Results may differ from the original layout by float
    rounding, as between any two GEMM kernels; apply it to the target before comparing against it.
    """
    for module in model.modules():
        if isinstance(module, torch.nn.Linear) and module.weight.is_contiguous():
            module.weight.data = module.weight.data.t().contiguous().t()
    return model


def _rows(x: torch.Tensor) -> int:
    return x.numel() // max(x.shape[-1], 1)


class HybridLinear(torch.nn.Linear):
    """An nn.Linear holding its weight in both layouts: the standard [out, in] (the parameter) and a transposed
    copy (`weight_t`, a contiguous [in, out] buffer). Inputs of at least `transposed_from` rows (tokens times
    batch rows) multiply by the copy, smaller ones by the parameter: MKL's GEMM kernels change with the row count,
    and on some CPUs the standard storage is faster for the 1-3 rows of autoregressive and small-tree passes while
    the transposed one is faster from 4 rows on. `hardware.auto_profile` picks the threshold from measured passes."""

    weight_t: torch.Tensor
    transposed_from: int

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        weight = self.weight_t.t() if _rows(x) >= self.transposed_from else self.weight
        return torch.nn.functional.linear(x, weight, self.bias)


class PackedLinear(torch.nn.Linear):
    """An nn.Linear that also holds its fp32 weight packed by MKL (`weight_packed`, an opaque tensor from
    `torch.ops.mkl._mkl_reorder_linear_weight`). Inputs x [..., in] of `packed_from` to `packed_until` rows
    (None: no upper limit) multiply through `torch.ops.mkl._mkl_linear` on the packed copy, others through
    `F.linear`.

    The packed copy is a plain attribute, not a buffer: `Module.to`, `deepcopy` and `state_dict` cannot handle
    it, so a model is put back to a plain layout (`set_linear_layout(model, "standard")`) before those."""

    weight_packed: torch.Tensor
    packed_from: int
    packed_until: int | None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rows = _rows(x)
        if rows < self.packed_from or (self.packed_until is not None and rows > self.packed_until):
            return torch.nn.functional.linear(x, self.weight, self.bias)
        # MKL's packed GEMM runs when the last argument equals the row count (else the op falls back to F.linear)
        return torch.ops.mkl._mkl_linear(x, self.weight_packed, self.weight, self.bias, rows)


class OneDNNLinear(torch.nn.Linear):
    """An nn.Linear that also holds its weight reordered for oneDNN (`weight_onednn`, an opaque mkldnn tensor from
    `torch.ops.mkldnn._reorder_linear_weight`, blocked for `PACK_ROWS` rows) and multiplies every input x [..., in]
    through `torch.ops.mkldnn._linear_pointwise` on it (the kernel torch's own compiler uses on CPUs): no GEMM
    library re-packs the weight per call, and the kernel does not change with the row count. fp32 or bf16, CPU,
    inference only (no gradient reaches the weight).

    Like `PackedLinear`'s, the copy is a plain attribute, not a buffer: put a model back to a plain layout
    (`set_linear_layout(model, "standard")`) before `Module.to`, `deepcopy` or `state_dict`."""

    weight_onednn: torch.Tensor

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return onednn_linear(x, self.weight_onednn, self.bias)


def onednn_weight(weight: torch.Tensor) -> torch.Tensor:
    """`weight` [out, in] reordered once for oneDNN's inner-product kernel (an opaque mkldnn tensor)."""
    return torch.ops.mkldnn._reorder_linear_weight(weight.contiguous(), PACK_ROWS)


def onednn_linear(x: torch.Tensor, weight_onednn: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """x [..., in] times a weight reordered by `onednn_weight`, plus bias [out]: [..., out]."""
    return torch.ops.mkldnn._linear_pointwise(x.contiguous(), weight_onednn, bias, "none", [], "")


def onednn_available() -> bool:
    """Whether this torch build can multiply by oneDNN-reordered weights (CPU builds with oneDNN)."""
    return (torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_reorder_linear_weight")
            and hasattr(torch.ops.mkldnn, "_linear_pointwise"))


@functools.cache
def onednn_bf16_available() -> bool:
    """Whether oneDNN can reorder bf16 weights on this CPU: its bf16 path needs avx512bw/vl/dq or avx_ne_convert, so
    not on an AVX2-only CPU (an AMD EPYC with avx2 alone, 2026-12-02)."""
    if not onednn_available():
        return False
    try:
        onednn_weight(torch.zeros(PACK_ROWS * 8, 64, dtype=torch.bfloat16))
    except RuntimeError:
        return False
    return True


def packing_available() -> bool:
    """Whether this torch build can multiply by MKL-packed weights (x86 builds with MKL)."""
    return torch.backends.mkl.is_available() and hasattr(torch.ops.mkl, "_mkl_linear")


def layout_name(kind: str, rows: int, last: int | None = None) -> str:
    """The name of a two-copy layout: layout_name('hybrid', 4) == 'hybrid:4', layout_name('packed', 4, 16) ==
    'packed:4-16'."""
    return f"{kind}:{int(rows)}" + (f"-{int(last)}" if last is not None else "")


def hybrid_layout(transposed_from: int) -> str:
    """The layout name of weights held in both layouts, transposed from `transposed_from` rows on: 'hybrid:4'."""
    return layout_name(HYBRID, transposed_from)


def parse_layout(layout: str) -> tuple[str, int | None, int | None]:
    """(name, first row count served by the second copy, last one or None): 'standard' / 'transposed' -> (name,
    None, None); 'hybrid:<rows>' (rows >= 2) -> ('hybrid', rows, None); 'packed' -> ('packed', 1, None);
    'packed:<rows>' (rows >= 1) or 'packed:<rows>-<last>' (last >= rows) -> ('packed', rows, last or None);
    'onednn' -> ('onednn', None, None)."""
    if layout in LAYOUTS or layout == ONEDNN:
        return layout, None, None
    if layout == PACKED:
        return PACKED, 1, None
    name, _, window = str(layout).partition(":")
    rows, dash, last = window.partition("-")
    if rows.isdigit() and not dash and name == HYBRID and int(rows) >= 2:
        return HYBRID, int(rows), None
    if name == PACKED and rows.isdigit() and int(rows) >= 1 and (not dash or (last.isdigit() and int(last) >= int(rows))):
        return PACKED, int(rows), int(last) if dash else None
    raise ConfigError(f"layout must be one of {LAYOUTS}, '{ONEDNN}', '{HYBRID}:<rows>' (rows >= 2), '{PACKED}:<rows>' "
                      f"or '{PACKED}:<rows>-<last>' (1 <= rows <= last), got '{layout}'")


def _linears(model: torch.nn.Module) -> list[torch.nn.Linear]:
    return [m for m in model.modules() if isinstance(m, torch.nn.Linear)]


def _second_copy_bytes(module: torch.nn.Linear, buffers_only: bool = False) -> int:
    """Bytes of a two-copy layer's second copy (MKL's padded size for a packed one), 0 for a plain layer;
    `buffers_only`: only a copy held as a module buffer (the transposed one of `HybridLinear`)."""
    if isinstance(module, HybridLinear):
        return module.weight_t.numel() * module.weight_t.element_size()
    if buffers_only:
        return 0
    if isinstance(module, PackedLinear):
        return module.weight_packed.numel() * module.weight_packed.element_size()
    if isinstance(module, OneDNNLinear):
        return module.weight.numel() * module.weight.element_size()  # the reordered copy holds as many values
    return 0


def _make_plain(module: torch.nn.Linear) -> None:
    """Drop a two-copy layer's second copy; any other nn.Linear (subclasses too) is left as it is."""
    if isinstance(module, HybridLinear):
        del module.weight_t, module.transposed_from
    elif isinstance(module, PackedLinear):
        del module.weight_packed, module.packed_from, module.packed_until
    elif isinstance(module, OneDNNLinear):
        del module.weight_onednn
    else:
        return
    module.__class__ = torch.nn.Linear


def _make_hybrid(module: torch.nn.Linear, transposed_from: int) -> int:
    """Make `module` a HybridLinear (keeping an existing copy); the bytes of a copy made now."""
    made = 0
    if not isinstance(module, HybridLinear):
        _make_plain(module)
        module.weight.data = module.weight.data.contiguous()
        module.register_buffer("weight_t", module.weight.data.t().contiguous(), persistent=False)
        module.__class__ = HybridLinear
        made = _second_copy_bytes(module)
    module.transposed_from = transposed_from
    return made


def _make_packed(module: torch.nn.Linear, packed_from: int, packed_until: int | None) -> int:
    """Make `module` a PackedLinear (keeping an existing copy); the bytes of a copy made now."""
    made = 0
    if not isinstance(module, PackedLinear):
        _make_plain(module)
        module.weight.data = module.weight.data.contiguous()
        packed = torch.ops.mkl._mkl_reorder_linear_weight(module.weight.data, PACK_ROWS)
        module.__dict__["weight_packed"] = packed  # not a buffer (see PackedLinear)
        module.__class__ = PackedLinear
        made = _second_copy_bytes(module)
    module.packed_from, module.packed_until = packed_from, packed_until
    return made


def _make_onednn(module: torch.nn.Linear) -> int:
    """Make `module` a OneDNNLinear (keeping an existing copy); the bytes of a copy made now."""
    if isinstance(module, OneDNNLinear):
        return 0
    _make_plain(module)
    module.weight.data = module.weight.data.contiguous()
    module.__dict__["weight_onednn"] = onednn_weight(module.weight.data)
    module.__class__ = OneDNNLinear
    return _second_copy_bytes(module)


def _check_onednn(model: torch.nn.Module) -> None:
    if not onednn_available():
        raise ConfigError("the onednn layout needs a torch build with oneDNN (mkldnn); use 'standard' or 'transposed'")
    for module in _linears(model):
        if module.weight.dtype not in (torch.float32, torch.bfloat16) or module.weight.device.type != "cpu":
            raise ConfigError(f"the onednn layout needs fp32 or bf16 weights on a CPU, got {module.weight.dtype} on "
                              f"{module.weight.device}")
        if module.weight.dtype == torch.bfloat16 and not onednn_bf16_available():
            raise ConfigError("the onednn layout in bf16 needs a CPU with oneDNN's bf16 path (avx512bw/vl/dq or "
                              "avx_ne_convert); use 'standard' or 'transposed' for bf16 weights on this one")


def _check_packable(model: torch.nn.Module) -> None:
    if not packing_available():
        raise ConfigError("the packed layout needs a torch build with MKL (x86 CPUs); use 'standard' or 'hybrid:<rows>'")
    for module in _linears(model):
        if module.weight.dtype != torch.float32 or module.weight.device.type != "cpu":
            raise ConfigError(f"the packed layout needs fp32 weights on a CPU, got {module.weight.dtype} on "
                              f"{module.weight.device}")


def linear_layout(model: torch.nn.Module) -> str:
    """'transposed' when the model's linear weights are stored transposed (see `transpose_linear_storage`),
    'hybrid:<rows>' / 'packed:<rows>' / 'onednn' when they are held in two copies, else 'standard'."""
    linears = _linears(model)
    if linears and all(isinstance(m, OneDNNLinear) for m in linears):
        return ONEDNN
    if linears and all(isinstance(m, HybridLinear) for m in linears) and len({m.transposed_from for m in linears}) == 1:
        return hybrid_layout(linears[0].transposed_from)
    windows = {(getattr(m, "packed_from", None), getattr(m, "packed_until", None)) for m in linears}
    if linears and all(isinstance(m, PackedLinear) for m in linears) and len(windows) == 1:
        return layout_name(PACKED, *windows.pop())
    if linears and all(m.weight.dim() == 2 and m.weight.t().is_contiguous() and not m.weight.is_contiguous()
                       for m in linears):
        return "transposed"
    return "standard"


def extra_bytes(model: torch.nn.Module, buffers_only: bool = False) -> int:
    """Bytes held by the second copies of a two-copy layout (0 for the plain layouts); `buffers_only`: only those
    among the model's buffers (what `model.buffers()` counts twice)."""
    return sum(_second_copy_bytes(module, buffers_only) for module in _linears(model))


def set_linear_layout(model: torch.nn.Module, layout: str, *, max_extra_bytes: int | None = None) -> torch.nn.Module:
    """Store every nn.Linear weight in `layout` (module docstring); values unchanged. A two-copy layout whose new
    copies would pass `max_extra_bytes` is undone (the model is left standard) and raises ConfigError."""
    name, rows, last = parse_layout(layout)
    if name in (HYBRID, PACKED, ONEDNN):
        if name == PACKED:
            _check_packable(model)
        if name == ONEDNN:
            _check_onednn(model)
        made = 0
        for module in _linears(model):
            if name == HYBRID:
                made += _make_hybrid(module, rows)
            elif name == PACKED:
                made += _make_packed(module, rows, last)
            else:
                made += _make_onednn(module)
            if max_extra_bytes is not None and made > max_extra_bytes:
                set_linear_layout(model, "standard")
                raise ConfigError(f"layout {layout} needs more than {max_extra_bytes / 1e9:.2f} GB for its second "
                                  f"copies of the weights")
        return model
    for module in _linears(model):
        _make_plain(module)
    if layout == "transposed":
        return transpose_linear_storage(model)
    for module in _linears(model):
        if not module.weight.is_contiguous():
            module.weight.data = module.weight.data.contiguous()
    return model
