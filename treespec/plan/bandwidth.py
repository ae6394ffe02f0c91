"""How close a pass comes to the memory-bandwidth bound: bytes a 1-token pass must read / this machine's bandwidth.

Decoding one token reads every weight the pass multiplies by once (the embedding contributes one row, so it counts
only where it doubles as the LM head) and the KV cache of the prefix. On a CPU with 2 threads that read is the
floor of a pass: t_bound = pass_bytes / bandwidth. `memory_bandwidth` measures the read bandwidth the way a pass
reads weights: torch reductions over a buffer much larger than the last-level cache, on the threads torch uses.
The ratio t(1) / t_bound says how much of a pass is something other than moving weights (kernels below the
bandwidth, attention, small operations, Python).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from statistics import median

import torch

from treespec.models.attention import attention_shape
from treespec.models.layouts import extra_bytes
from treespec.models.quantize import Int4Linear


@dataclass(frozen=True)
class PassBytes:
    weights: int  # bytes of the weights one pass multiplies by (one copy of each, the LM head included)
    kv_cache: int  # bytes of keys and values a pass over a `prefix_len` cache reads
    prefix_len: int

    @property
    def total(self) -> int:
        return self.weights + self.kv_cache


def tensor_bytes(tensors, excluding=()) -> int:
    """Bytes of the distinct tensors among `tensors` (a tensor listed twice counts once), leaving out those that share
    storage with a tensor of `excluding` (e.g. a head's tensors that are its target's)."""
    shared = {t.untyped_storage().data_ptr() for t in excluding}
    seen, total = set(), 0
    for tensor in tensors:
        key = (tensor.untyped_storage().data_ptr(), tensor.storage_offset(), tuple(tensor.shape))
        if key not in seen and key[0] not in shared:
            seen.add(key)
            total += tensor.numel() * tensor.element_size()
    return total


def pass_bytes(model: torch.nn.Module, prefix_len: int) -> PassBytes:
    """What a 1-token pass of a causal LM reads after `prefix_len` cached tokens: its parameters and buffers (of a
    4-bit layer, what its kernel reads: `Int4Linear.product_tensors`), less the second copies of a two-copy layout
    that are buffers (the transposed copies of 'hybrid'; 'packed' and 'onednn' hold theirs outside the module's
    tensors, so they count once) and the input embedding unless it is the LM head; plus 2 x layers x kv_heads x
    head_dim x prefix_len cache entries."""
    tensors = []
    for module in model.modules():
        if isinstance(module, Int4Linear):
            tensors += module.product_tensors()
        else:
            tensors += [*module.parameters(recurse=False), *module.buffers(recurse=False)]
    weights = tensor_bytes(tensors) - extra_bytes(model, buffers_only=True)
    embedding, head = model.get_input_embeddings(), model.get_output_embeddings()
    head_weight = getattr(head, "weight", None) if head is not None else None
    if head_weight is None or embedding.weight.data_ptr() != head_weight.data_ptr():
        weights -= embedding.weight.numel() * embedding.weight.element_size()
    config = model.config.get_text_config()
    head_dim, _, kv_heads = attention_shape(config)
    element = next(model.parameters()).element_size() if next(model.parameters()).is_floating_point() else 4
    cache = 2 * config.num_hidden_layers * kv_heads * head_dim * prefix_len * element
    return PassBytes(int(weights), int(cache), int(prefix_len))


def memory_bandwidth(megabytes: int = 1024, repeats: int = 7) -> float:
    """Median read bandwidth in GB/s: `torch.sum` over an fp32 buffer of `megabytes`, on torch's current threads
    (one warm-up first)."""
    buffer = torch.ones(megabytes * 2**20 // 4)
    seconds = []
    for _ in range(repeats + 1):
        start = time.perf_counter()
        buffer.sum()
        seconds.append(time.perf_counter() - start)
    return buffer.numel() * 4 / median(seconds[1:]) / 1e9


def bandwidth_bound_ms(model: torch.nn.Module, prefix_len: int, bandwidth_gbs: float) -> float:
    """The fastest a 1-token pass can be here: `pass_bytes(...).total` at `bandwidth_gbs`, in ms."""
    return pass_bytes(model, prefix_len).total / (bandwidth_gbs * 1e9) * 1000
