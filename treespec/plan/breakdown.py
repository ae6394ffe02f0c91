"""Where a target pass's time goes: matrix products, attention, the LM head, and the small operators and Python
around them.

`pass_breakdown` times the engine's lean target pass (treespec.models.lean) over n tree tokens on a prefilled cache,
once without the profiler (the wall time a pass takes) and once under `torch.profiler`, whose operator self times
are sorted into categories by operator name (`category`); the LM head's operators are counted apart (they run
inside a `record_function` range named LM_HEAD). The large kernels (products, attention, the head) take tens to
hundreds of microseconds a call, so the profiler's own cost of a microsecond or two per call barely moves them;
what is left of the unprofiled wall time is the small operators (norms, rotary, casts, cache writes, slicing) with
the Python and dispatch between them, which the profiler cannot split reliably (it inflates exactly those). That
remainder, with the operator count, is what a fused or compiled pass could remove; the products against the bytes
they read say how far the kernels are from the memory bandwidth (treespec.plan.bandwidth). A 4-bit target whose
passes run in C (treespec.models.native_pass) is one operator to the profiler; the C pass times its own products
and attention, and the rest of it (norms, rotary, cache writes, SiLU) counts with the small operators.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from statistics import median

import torch
from torch.autograd.profiler import record_function
from transformers import PreTrainedModel

from treespec.decode.cache import commit
from treespec.decode.mask import flatten
from treespec.decode.timing import Clock
from treespec.models import int4_cpu
from treespec.models.lean import lean_decoder
from treespec.plan.costs import _prefilled_cache

LM_HEAD = "treespec.lm_head"
_UNDO = "treespec.undo"  # the cache rollback between passes: profiled, not part of a pass
KERNELS = ("quantized products", "dense products", "attention", "LM head")
REST = "small operators and Python"
CATEGORIES = (*KERNELS, REST)


def category(name: str) -> str:
    """The category of a profiled operator outside the LM head (REST for every small one)."""
    if "int4pack" in name or "int8pack" in name or name in (int4_cpu.KERNEL_NAME, int4_cpu.INT6_KERNEL_NAME):
        return "quantized products"
    if "scaled_dot_product" in name or "flash_attention" in name:
        return "attention"
    if name in ("mkldnn::_linear_pointwise", "aten::mm", "aten::addmm", "aten::linear", "aten::matmul") or \
            "mkl_linear" in name:
        return "dense products"
    return REST


@dataclass(frozen=True)
class PassBreakdown:
    tokens: int  # n, the tree tokens of the pass
    prefix_len: int
    wall_ms: float  # median wall time of one pass, without the profiler
    ms: dict  # category -> milliseconds per pass (CATEGORIES; they add up to wall_ms)
    operators: int  # top-level operator calls per pass (those no other operator called)

    def shares(self) -> dict:
        """category -> fraction of the pass."""
        return {key: value / self.wall_ms for key, value in self.ms.items()}

    def line(self) -> str:
        parts = ", ".join(f"{key} {value:.2f}" for key, value in self.ms.items())
        return f"{self.tokens}-token pass {self.wall_ms:.2f} ms ({self.operators} operator calls), ms: {parts}"


def _ancestors(event):
    parent = event.cpu_parent
    while parent is not None:
        yield parent
        parent = parent.cpu_parent


def pass_breakdown(model: PreTrainedModel, tokens: int = 1, *, prefix_len: int = 400, repeats: int = 10,
                   warmup: int = 5, seed: int = 0) -> PassBreakdown:
    """The breakdown of the engine's target pass over a chain of `tokens` tree tokens on a `prefix_len` cache
    (medians over `repeats` unprofiled passes; categories from `repeats` profiled ones). Needs a model the lean
    decoder runs (ValueError otherwise)."""
    lean = lean_decoder(model)
    if lean is None:
        raise ValueError("pass_breakdown times the lean target pass; this model does not run through it")
    device, dtype = next(model.parameters()).device, next(model.parameters()).dtype
    vocab = model.config.get_text_config().vocab_size
    head = model.get_output_embeddings()
    generator = torch.Generator().manual_seed(seed)
    clock = Clock(device)
    with torch.inference_mode():
        cache = _prefilled_cache(model, 1, prefix_len, prefix_len + tokens + 8, generator)
        ids = torch.randint(0, vocab, (1, tokens), generator=generator).to(device)
        flat = flatten(ids, [tuple(range(-1, tokens - 1))], [tuple(range(tokens))], [prefix_len], prefix_len, dtype)

        def one() -> float:
            start = clock()
            hidden, _ = lean(flat.input_ids, flat.position_ids, flat.attention_mask, cache)
            with record_function(LM_HEAD):
                head(hidden)
            elapsed = clock() - start
            with record_function(_UNDO):
                commit(cache, [prefix_len], prefix_len, [[]])
            return elapsed

        for _ in range(warmup):
            one()
        with lean.native.timed() if lean.native is not None else contextlib.nullcontext() as seconds:
            wall_ms = 1e3 * median(one() for _ in range(repeats))
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
            for _ in range(repeats):
                one()
    kernels = dict.fromkeys(KERNELS, 0.0)
    calls = 0
    for event in prof.events():
        above = {a.name for a in _ancestors(event)}
        if event.name in (LM_HEAD, _UNDO) or _UNDO in above or event.device_type.name != "CPU":
            continue
        calls += not any(a.name.startswith(("aten::", "mkldnn::")) for a in _ancestors(event))
        kind = "LM head" if LM_HEAD in above else category(event.name)
        if kind in kernels:
            kernels[kind] += event.self_cpu_time_total / 1e3 / repeats  # us -> ms per pass
    if seconds is not None:  # the C pass (treespec.models.native_pass) times its own products and attention
        kernels["quantized products"] += 1e3 * seconds[0] / repeats
        kernels["attention"] += 1e3 * seconds[1] / repeats
    measured = sum(kernels.values())
    if measured > wall_ms:  # a noisy profiled run: the kernels cannot have taken longer than the pass
        kernels = {key: value * wall_ms / measured for key, value in kernels.items()}
    return PassBreakdown(tokens, prefix_len, wall_ms, {**kernels, REST: max(0.0, wall_ms - measured)},
                         round(calls / repeats))
