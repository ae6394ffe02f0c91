"""KV-cache bookkeeping for tree passes: a preallocated cache, and keeping only the accepted slots.

Rows are right padded: row b's committed tokens fill slots [0, lengths[b]); a pass over the rows' trees appends
one slot per node behind the longest row (slot `start + i` for node i). `commit` keeps each row's committed slots
plus the slots of its accepted path (a gather of non-contiguous slots into contiguous ones behind the row's own
tokens) and drops the rest; `select_rows` drops finished rows. One row is B = 1, with no padding. Where treespec's
kernels build (treespec.models.int4_cpu), commit moves every layer's slots in one C call (`cache_moves.c`), else by a
torch gather and scatter per buffer; the two leave the same bits.

`new_cache` returns a transformers `Cache` whose layers write new keys/values in place into buffers
allocated once (transformers' DynamicCache concatenates the whole cache on every forward instead). A model whose
attention runs in float64 (`treespec.models.attention.exact_attention`: a 4-bit target) gets float64 buffers, so
that keys and values are converted once, when written, instead of on every pass.
"""

from __future__ import annotations

import ctypes
import functools
from collections.abc import Sequence

import torch
from transformers import PreTrainedModel
from transformers.cache_utils import Cache, DynamicLayer

from treespec.errors import ConfigError
from treespec.models import int4_cpu
from treespec.models.attention import NAME as TREESPEC_SDPA
from treespec.models.attention import exact_attention
from treespec.models.lean import lean_decoder


class PreallocatedLayer(DynamicLayer):
    """A full-attention layer cache with buffers [B, H, capacity, D]; `keys`/`values` are views of the
    filled part. Appending writes in place; the buffers double when full."""

    def __init__(self, capacity: int, dtype: torch.dtype | None = None):
        super().__init__()
        self.capacity = capacity
        self.length = 0
        self.storage_dtype = dtype  # None: the dtype of the first keys written

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        batch, heads, _, _ = key_states.shape
        self.device = key_states.device
        dtype = self.storage_dtype or key_states.dtype
        self.key_buffer = key_states.new_empty(batch, heads, self.capacity, key_states.shape[-1], dtype=dtype)
        self.value_buffer = value_states.new_empty(batch, heads, self.capacity, value_states.shape[-1], dtype=dtype)
        self.is_initialized = True
        self.truncate(0)

    def _grow(self, needed: int) -> None:
        self.capacity = max(needed, 2 * self.capacity)
        for name in ("key_buffer", "value_buffer"):
            old = getattr(self, name)
            new = old.new_empty(*old.shape[:2], self.capacity, old.shape[-1])
            new[..., : self.length, :] = old[..., : self.length, :]
            setattr(self, name, new)

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        end = self.length + key_states.shape[-2]
        if end > self.capacity:
            self._grow(end)
        self.key_buffer[..., self.length:end, :] = key_states
        self.value_buffer[..., self.length:end, :] = value_states
        self.truncate(end)
        return self.keys, self.values

    def truncate(self, length: int) -> None:
        """Keep the first `length` slots."""
        self.length = length

    # the filled part as views made when read: a decode step truncates every layer twice (its pass, its commit), and
    # two views a layer each time cost about 0.3 ms a step for the default target (AMD EPYC, 2026-12-05)
    @property
    def keys(self) -> torch.Tensor | None:
        return self.key_buffer[..., : self.length, :] if self.is_initialized else None

    @keys.setter
    def keys(self, value) -> None:
        if value is not None:
            raise AttributeError("a PreallocatedLayer's keys are a view of its buffer: write through update()")

    @property
    def values(self) -> torch.Tensor | None:
        return self.value_buffer[..., : self.length, :] if self.is_initialized else None

    @values.setter
    def values(self, value) -> None:
        if value is not None:
            raise AttributeError("a PreallocatedLayer's values are a view of its buffer: write through update()")

    def get_seq_length(self) -> int:
        return self.length if self.is_initialized else 0

    def crop(self, tokens_to_remove: int) -> None:
        if tokens_to_remove < 0 and self.is_initialized:
            self.truncate(max(0, self.length + tokens_to_remove))

    def reset(self) -> None:
        if self.is_initialized:
            self.truncate(0)


def new_cache(model: PreTrainedModel, max_length: int, layers: int | None = None) -> Cache:
    """An empty full-attention cache for `max_length` tokens (it grows if needed); refuses sliding-window
    models whose window is shorter than `max_length` (a tree mask replaces the model's own masks, so
    windows would not be applied). layers: how many layer caches (default: the model's layer count; fewer for a
    pass that skips layers, treespec.models.layer_skip)."""
    window = getattr(model.config.get_text_config(), "sliding_window", None)
    uses_window = getattr(model.config.get_text_config(), "use_sliding_window", True)
    if window is not None and uses_window and max_length > window:
        raise ConfigError(
            f"{type(model).__name__} uses a sliding attention window of {window} tokens; prompt + max_new_tokens "
            f"+ tree ({max_length}) must fit inside it"
        )
    if layers is None:
        layers = model.config.get_text_config().num_hidden_layers
    dtype = cache_dtype(model)
    return Cache(layers=[PreallocatedLayer(max_length + 64, dtype) for _ in range(layers)])


def cache_dtype(model: PreTrainedModel) -> torch.dtype | None:
    """float64 for a model whose attention is exact (`exact_attention`) and reads the cache through treespec's
    attention (which takes float64 keys with float32 queries; transformers' own would not), unless its passes run
    in C (treespec.models.native_pass, which reads fp32 keys and widens them itself); else None: the dtype of the
    keys written."""
    if getattr(model.config, "_attn_implementation", None) != TREESPEC_SDPA:
        return None
    if not any(exact_attention(module) for module in model.modules()):
        return None
    lean = lean_decoder(model)
    return None if lean is not None and lean.native is not None else torch.float64


def cache_length(cache: Cache) -> int:
    return cache.get_seq_length()


def commit(cache: Cache, lengths: Sequence[int], start: int, kept: Sequence[Sequence[int]]) -> list[int]:
    """Keep the accepted slots of B right-padded rows, in place: row b keeps its slots [0, lengths[b]) and moves
    slot start + kept[b][j] to lengths[b] + j (kept[b] ascending); the cache keeps the longest row. Returns the new
    lengths [B]. Rows whose kept slots are already where they go (a full row whose path was the first nodes) move
    nothing; one row (B = 1) is the case lengths == [start]."""
    rows = len(lengths)
    new_lengths = [int(lengths[b]) + len(kept[b]) for b in range(rows)]
    for b in range(rows):
        if int(lengths[b]) > start:
            raise ValueError(f"row {b} holds {lengths[b]} tokens, more than the {start} slots before the tree")
    moving = {b for b in range(rows) if any(start + k != int(lengths[b]) + j for j, k in enumerate(kept[b]))}
    width = max((len(kept[b]) for b in moving), default=0)
    source = target = None
    if moving:
        targets = [list(range(int(lengths[b]), int(lengths[b]) + width)) for b in range(rows)]
        # padding entries (and rows in place) copy a slot onto itself
        sources = [[start + int(k) for k in kept[b]] + slots[len(kept[b]):] if b in moving else slots
                   for b, slots in enumerate(targets)]
        source, target = torch.tensor(sources, dtype=torch.long), torch.tensor(targets, dtype=torch.long)
    length = max(new_lengths, default=0)
    moved_in_c = bool(moving) and _move_slots(cache, source, target)
    src = dst = None
    for layer in cache.layers:
        preallocated = isinstance(layer, PreallocatedLayer)
        if preallocated:  # its buffers, not views of them (views and checks of the default target's 30 layers took
            # ~0.5 ms a step, AMD EPYC, 2 cores, AVX2 only, 2026-12-06)
            if not layer.is_initialized:
                continue
            keys, values = layer.key_buffer, layer.value_buffer
        elif not getattr(layer, "is_initialized", False) or layer.keys is None or layer.keys.numel() == 0:
            continue
        else:
            keys, values = layer.keys, layer.values
        if moving and not moved_in_c:
            if src is None or src.shape[1] != keys.shape[1] or src.shape[-1] != keys.shape[-1]:
                shape = (-1, keys.shape[1], -1, keys.shape[-1])  # [B, H, w, D]
                src = source.to(keys.device)[:, None, :, None].expand(*shape)
                dst = target.to(keys.device)[:, None, :, None].expand(*shape)
            keys.scatter_(2, dst, keys.gather(2, src))
            values.scatter_(2, dst, values.gather(2, src))
        if preallocated:
            layer.truncate(length)
        else:
            layer.keys, layer.values = keys[..., :length, :], values[..., :length, :]
    return new_lengths


@functools.cache
def _slot_mover():
    """treespec_move_slots (treespec/models/cache_moves.c) from treespec's kernels, or None where they do not build."""
    library, _ = int4_cpu.library()
    if library is None:
        return None
    function = library.treespec_move_slots
    function.restype = None
    function.argtypes = [ctypes.c_void_p, ctypes.c_void_p] + [ctypes.c_int64] * 4 + [ctypes.c_void_p] * 2 + [ctypes.c_int64]
    return function


def _move_slots(cache: Cache, source: torch.Tensor, target: torch.Tensor) -> bool:
    """Move every layer's slots source[b, j] -> target[b, j] ([B, w]; targets at or below their sources, both
    ascending) in one C call, where every initialized layer is a PreallocatedLayer with contiguous CPU buffers of one
    slot size and head count and treespec's kernels are built; False (nothing moved) otherwise. The default pair at
    B = 8: the caches' commits took 3.1 ms a step as a gather and a scatter per buffer ([Intel(R) Xeon(R) Processor @
    2.80GHz, 2 cores; ISA: avx2 avx512f], 2026-12-07)."""
    mover = _slot_mover()
    if mover is None:
        return False
    if not all(isinstance(layer, PreallocatedLayer) for layer in cache.layers):
        return False
    buffers = [buffer for layer in cache.layers if layer.is_initialized
               for buffer in (layer.key_buffer, layer.value_buffer)]  # contiguous: made by new_empty or index_select
    if not buffers:
        return True
    shape = buffers[0].shape
    kinds = {(b.shape[0], b.shape[1], b.shape[3], b.dtype, b.device) for b in buffers}
    if len(kinds) > 1 or buffers[0].device.type != "cpu" or shape[0] != source.shape[0]:
        return False
    pointers = (ctypes.c_void_p * len(buffers))(*(b.data_ptr() for b in buffers))
    capacity = (ctypes.c_int64 * len(buffers))(*(b.shape[2] for b in buffers))
    source, target = source.contiguous(), target.contiguous()
    mover(pointers, capacity, len(buffers), shape[0], shape[1], shape[-1] * buffers[0].element_size(),
          source.data_ptr(), target.data_ptr(), source.shape[1])
    return True


def select_rows(cache: Cache, rows: Sequence[int]) -> None:
    """Keep only the batch rows `rows` (in that order), in place; the other rows stop costing work."""
    for layer in cache.layers:
        if not getattr(layer, "is_initialized", False) or layer.keys is None:
            continue
        index = torch.as_tensor(list(rows), dtype=torch.long, device=layer.keys.device)
        if isinstance(layer, PreallocatedLayer):
            layer.key_buffer = layer.key_buffer.index_select(0, index)
            layer.value_buffer = layer.value_buffer.index_select(0, index)
            layer.truncate(layer.length)
        else:
            layer.keys, layer.values = layer.keys.index_select(0, index), layer.values.index_select(0, index)
