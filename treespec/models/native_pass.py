"""A 4/6-bit decoder's whole pass in one C call (`decoder_kernel.c`): the lean pass without Python between operators.

A lean pass (treespec.models.lean) of the default 135M target runs some 2,400 torch operators; at one to sixteen
query rows most of its time is their dispatch and the float64 copies exact attention makes, not the products.
`NativePass` runs the same layers, in the same exact arithmetic (treespec.models.exact: the products by
treespec's 4-bit kernel, norms, attention and SiLU in float64 rounded once, the rest fp32 operation by operation),
in C: the embeddings and the rotary cos/sin come from the model's modules, the LM head stays with the caller (a
stack of layers without a final norm, an EAGLE head's, returns its last layer's output as it is).
Its results are the lean pass's and transformers' modules' (tests/models/test_native_pass.py), and each query
row's depend only on its own inputs and the keys it may see.

`native_unsupported(lean)` says why a model cannot run this way: it needs treespec's kernels (treespec.models.int4_cpu:
x86-64 with AVX-512 or AVX2 and a C compiler), every projection held in 4 bits (`Int4Linear`) or 6 bits (`Int6Linear`, a
GGUF's Q6_K and Q5_0 tensors) on treespec's kernels (q/k/v and gate/up as at most three products side by side),
exact norms and SiLU, fp32 activations, head sizes a multiple of 64. The KV cache is held in fp32
(the keys and values are fp32 values; the C pass widens them as it reads). `TREESPEC_NATIVE_PASS=0` turns it off.

A pass with fewer (row, kv head) pairs than two per thread may attend each kv head's query heads in one task or in two
(both reading its cache): `HeadSplit` measures which is faster on the machine, in place; the outputs are the same.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import hashlib
import os
import statistics
import time
from collections.abc import Sequence

import torch

from treespec.models import int4_cpu
from treespec.models.exact import ExactSiLU, exact_rms_norm
from treespec.models.quantize import Int4Linear, Int6Linear

ENV = "TREESPEC_NATIVE_PASS"  # "0": run 4-bit models' passes through the lean torch loop instead
FUNCTION = "treespec_decoder_pass"


MAX_PARTS = 3  # products per joined projection (q | k | v where v is held in 6 bits and q, k in 4)


class _Part(ctypes.Structure):
    _fields_ = [("bits", ctypes.c_int64), ("codes", ctypes.c_void_p), ("scale", ctypes.c_void_p),
                ("minimum", ctypes.c_void_p), ("bias", ctypes.c_void_p), ("inputs", ctypes.c_int64),
                ("outputs", ctypes.c_int64), ("padded", ctypes.c_int64), ("group", ctypes.c_int64),
                ("x_format", ctypes.c_int64)]


class _Product(ctypes.Structure):
    _fields_ = [("parts", _Part * MAX_PARTS), ("count", ctypes.c_int64), ("padded", ctypes.c_int64)]


class _Layer(ctypes.Structure):
    _fields_ = [("input_norm", ctypes.c_void_p), ("attention_norm", ctypes.c_void_p), ("input_eps", ctypes.c_double),
                ("attention_eps", ctypes.c_double), ("qkv", _Product), ("o", _Product), ("gate_up", _Product),
                ("down", _Product)]


class _Shape(ctypes.Structure):
    _fields_ = [("batch", ctypes.c_int64), ("rows", ctypes.c_int64), ("hidden", ctypes.c_int64),
                ("heads", ctypes.c_int64), ("kv_heads", ctypes.c_int64), ("head_dim", ctypes.c_int64),
                ("intermediate", ctypes.c_int64), ("past", ctypes.c_int64), ("scale", ctypes.c_double),
                ("final_norm", ctypes.c_void_p), ("final_eps", ctypes.c_double), ("threads", ctypes.c_int),
                ("seconds", ctypes.c_void_p), ("split_heads", ctypes.c_int64)]


class HeadSplit:
    """Whether the passes with fewer (row, kv head) pairs than two per thread give each kv head's query heads to two
    threads (both then read its cache) or keep them together (fewer tasks than an even share): which is faster
    depends on the machine, the outputs are the same bit for bit. `fixed` decides; None measures it in place: the
    first `trials` such passes alternate, timed, and the lower median wins."""

    def __init__(self, fixed: bool | None = None, trials: int = 8):
        self.chosen = fixed
        self.trials = trials
        self.seconds: dict[bool, list[float]] = {False: [], True: []}

    def next(self) -> bool:
        """The setting of the next such pass."""
        if self.chosen is not None:
            return self.chosen
        return len(self.seconds[True]) < len(self.seconds[False])

    def record(self, split: bool, seconds: float) -> None:
        """A pass's wall time (per layer) with `split`; decides once both settings have `trials` passes."""
        if self.chosen is not None:
            return
        self.seconds[split].append(seconds)
        if min(len(v) for v in self.seconds.values()) >= self.trials:
            self.chosen = statistics.median(self.seconds[True]) < statistics.median(self.seconds[False])

    def summary(self) -> dict:
        """{"split": the choice (None: not made yet), "ms_per_layer": {"one task" / "two tasks": the measured median}}."""
        return {"split": self.chosen, "ms_per_layer": {
            name: round(1e3 * statistics.median(self.seconds[split]), 4)
            for name, split in (("one task", False), ("two tasks", True)) if self.seconds[split]}}


@functools.cache
def _function():
    library, why = int4_cpu.library()
    if library is None:
        return None, why
    function = getattr(library, FUNCTION)
    function.restype = ctypes.c_int
    function.argtypes = [ctypes.c_void_p] * 2 + [ctypes.c_int64] + [ctypes.c_void_p] * 9
    return function, None


def pass_identity() -> str:
    """What 4-bit models' passes run on here, for profile cache keys: "c:<hash of the kernels' sources>" or "torch"
    (the lean torch loop: the kernels cannot run, or ENV turns the C pass off)."""
    if os.environ.get(ENV, "1") == "0" or _function()[1] is not None:
        return "torch"
    digest = hashlib.sha256(b"".join(source.read_bytes() for source in int4_cpu.SOURCES + int4_cpu.HEADERS)).hexdigest()
    return f"c:{digest[:12]}"


def _on_kernel(layer) -> bool:
    """Whether a product runs on treespec's 4-bit or 6-bit kernel."""
    return isinstance(layer, (Int4Linear, Int6Linear)) and layer.kernel == "treespec"


def _parts(projection) -> list:
    """The products of a projection: a joined one's (treespec.models.lean.Joined), or the layer itself."""
    return list(getattr(projection, "parts", [projection]))


def _fp32(tensor: torch.Tensor) -> bool:
    return tensor.dtype == torch.float32 and tensor.is_contiguous() and tensor.device.type == "cpu"


def shape_unsupported(head_dim: int, heads: int, kv_heads: int) -> str | None:
    """Why the C pass cannot run attention of this shape, or None when it can."""
    if head_dim % 64 or heads % kv_heads:
        return f"head size {head_dim} (a multiple of 64 is needed) or heads {heads} / {kv_heads}"
    return None


def native_unsupported(lean) -> str | None:
    """Why a `LeanDecoder`'s model cannot run through `NativePass`, or None when it can."""
    if os.environ.get(ENV, "1") == "0":
        return f"{ENV}=0"
    why = _function()[1]
    if why is not None:
        return why
    shape = shape_unsupported(lean.head_dim, lean.heads, lean.kv_heads)
    if shape is not None:
        return shape
    if lean.final_norm is not None and (not _fp32(lean.final_norm) or lean.final_norm_function is not exact_rms_norm):
        return "a final norm that is not an exact fp32 RMSNorm"
    for layer in lean.layers:
        for projection in (layer.qkv, layer.out, layer.gate_up, layer.down):
            parts = _parts(projection)
            if not all(_on_kernel(p) for p in parts):
                return "a projection that is not held in 4 or 6 bits on treespec's kernels"
            if len(parts) > MAX_PARTS or any(p.out_features % int4_cpu.BLOCK for p in parts[:-1]):
                return f"a projection of more than {MAX_PARTS} products, or of parts not a multiple of 16 wide"
        if not (layer.exact and layer.norm is exact_rms_norm and isinstance(layer.act, ExactSiLU)):
            return "norms, attention or activation outside exact arithmetic (treespec.models.exact)"
        if not (_fp32(layer.input_norm) and _fp32(layer.attention_norm)):
            return "norm weights that are not fp32"
        if any(p.bias is not None and not _fp32(p.bias)
               for projection in (layer.qkv, layer.out, layer.gate_up, layer.down) for p in _parts(projection)):
            return "a bias that is not fp32"
        if layer.scale != lean.layers[0].scale:
            return "attention scales that differ between layers"
    return None


def _part(layer: Int4Linear | Int6Linear) -> _Part:
    six = isinstance(layer, Int6Linear)
    return _Part(6 if six else 4, layer.kernel_codes.data_ptr(), layer.kernel_scale.data_ptr(),
                 None if six else layer.kernel_minimum.data_ptr(), None if layer.bias is None else layer.bias.data_ptr(),
                 layer.in_features, layer.out_features, layer.kernel_codes.shape[0] * int4_cpu.BLOCK,
                 layer.group if six else int4_cpu.GROUP, int4_cpu.fp32_format(layer.activations))


def _product(projection) -> _Product:
    parts = [_part(p) for p in _parts(projection)]
    return _Product((_Part * MAX_PARTS)(*parts), len(parts), sum(p.padded for p in parts))


class NativePass:
    """A `LeanDecoder`'s layers as `decoder_kernel.c`'s structures (built once; the tensors stay the decoder's)."""

    def __init__(self, lean):
        reason = native_unsupported(lean)
        if reason is not None:
            raise ValueError(f"NativePass cannot run this model: {reason}")
        self.lean = lean
        self.seconds = None  # ctypes (c_double * 3) while `timed`: seconds in the products, attention, the rest
        self.head_split = HeadSplit()
        self.layers = (_Layer * len(lean.layers))(*[
            _Layer(layer.input_norm.data_ptr(), layer.attention_norm.data_ptr(), layer.input_eps, layer.attention_eps,
                   _product(layer.qkv), _product(layer.out), _product(layer.gate_up), _product(layer.down))
            for layer in lean.layers])

    @contextlib.contextmanager
    def timed(self):
        """Within the block, the passes add the seconds they spend in the products, attention and the rest (the
        norms, rotary embedding, cache writes, SiLU, residuals) to the yielded (c_double * 3)."""
        self.seconds = (ctypes.c_double * 3)()
        try:
            yield self.seconds
        finally:
            self.seconds = None

    def usable(self, cache, rows: int, layers: Sequence[int]) -> bool:
        """Whether the cache layers the pass would write hold fp32 buffers it can write in place (the protocol of
        treespec.decode.cache.PreallocatedLayer)."""
        for slot in range(len(layers)):
            layer = cache.layers[slot] if slot < len(cache.layers) else None
            if not all(hasattr(layer, name) for name in ("capacity", "storage_dtype", "_grow", "truncate")):
                return False
            if layer.is_initialized:
                if layer.key_buffer.dtype != torch.float32 or layer.key_buffer.shape[0] != rows:
                    return False
            elif layer.storage_dtype not in (None, torch.float32):
                return False
        return True

    def __call__(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, mask: torch.Tensor, cache,
                 rows: int, m: int, keep: Sequence[int], layers: Sequence[int]
                 ) -> tuple[torch.Tensor, dict[int, torch.Tensor]]:
        """x [B M, H] fp32 embeddings, cos/sin [B, M, d], mask [B or 1, 1, M, L + M] (additive: 0 visible, or
        bool), cache as `LeanDecoder` takes it (`usable`) -> (last hidden states [B, M, H], normed where the decoder
        has a final norm; {i: hidden
        states [B, M, H] after i layers, for i in keep})."""
        lean, d = self.lean, self.lean.head_dim
        past = cache.layers[0].get_seq_length()
        end = past + m
        keys, values, capacity = [], [], []
        for slot in range(len(layers)):
            layer = cache.layers[slot]
            if not layer.is_initialized:
                empty = x.new_empty(rows, lean.kv_heads, 0, d)
                layer.lazy_initialization(empty, empty)
            if layer.length != past:
                raise ValueError(f"cache layer {slot} holds {layer.length} slots where layer 0 holds {past}")
            if end > layer.capacity:
                layer._grow(end)
            keys.append(layer.key_buffer.data_ptr())
            values.append(layer.value_buffer.data_ptr())
            capacity.append(layer.capacity)
        visible = (mask == 0) if mask.is_floating_point() else mask
        visible = visible.reshape(-1, m, end).expand(rows, m, end).to(torch.uint8).contiguous()  # [B, M, L + M]
        out = torch.empty(rows * m, lean.hidden)
        kept = {i: torch.empty(rows, m, lean.hidden) for i in keep}
        kept_pointers = (ctypes.c_void_p * (len(layers) + 1))(
            *[kept[i].data_ptr() if i in kept else None for i in range(len(layers) + 1)])
        threads = torch.get_num_threads()
        splittable = rows * m * lean.kv_heads < 2 * threads and lean.heads > lean.kv_heads  # the one place it is decided
        split = splittable and self.head_split.next()
        shape = _Shape(rows, m, lean.hidden, lean.heads, lean.kv_heads, d, lean.intermediate, past,
                       lean.layers[0].scale, None if lean.final_norm is None else lean.final_norm.data_ptr(),
                       lean.final_eps, threads, None if self.seconds is None else ctypes.addressof(self.seconds),
                       int(split))
        if len(layers) == len(lean.layers) and list(layers) == list(range(len(lean.layers))):
            structures = self.layers
        else:
            structures = (_Layer * len(layers))(*[self.layers[i] for i in layers])
        x, cos, sin = x.contiguous(), cos.contiguous(), sin.contiguous()
        arguments = (ctypes.byref(shape), structures, len(layers), (ctypes.c_void_p * len(keys))(*keys),
                     (ctypes.c_void_p * len(values))(*values), (ctypes.c_int64 * len(capacity))(*capacity),
                     x.data_ptr(), cos.data_ptr(), sin.data_ptr(), visible.data_ptr(), out.data_ptr(), kept_pointers)
        start = time.perf_counter()
        if torch.autograd.profiler._is_profiler_enabled:  # a named range for the profiler (plan.breakdown)
            with torch.profiler.record_function(FUNCTION):
                status = _function()[0](*arguments)
        else:
            status = _function()[0](*arguments)
        if splittable:  # per layer: a self-speculating draft runs some of the layers only
            self.head_split.record(split, (time.perf_counter() - start) / len(layers))
        if status:
            raise MemoryError("treespec's decoder pass could not allocate its buffers")
        for slot in range(len(layers)):
            cache.layers[slot].truncate(end)
        return out.view(rows, m, -1), kept
