"""Profiles measured where treespec runs: `hardware=auto`, cached by everything a timing depends on.

On first use `auto_profile` measures, for the loaded pair on this device, every weight layout (standard,
or linear weights stored transposed: `treespec.models.layouts`) and, with dtype "auto", fp32 and bf16
(only on a GPU or a CPU with AMX / avx512_bf16), for the target and the draft separately. Where the target's
two layouts cross over (standard faster for small passes, transposed from some tree size on), the hybrid
layout that holds both and switches at that size (`layouts.HybridLinear`) is measured too; in fp32 with MKL,
so are MKL-packed weights (`layouts.PackedLinear`) for every pass and from their crossover with the standard
layout, when their padded copies fit in half the memory available; and, where torch has oneDNN, weights reordered
once for oneDNN's kernel (`layouts.OneDNNLinear`), for both models and in every dtype, when that copy fits in half
the memory available. An EAGLE head in fp32 is also timed with its output layer alone in bf16 (`BF16_HEAD`:
its largest matrix at half the bytes; drafts only propose, so this changes no output's distribution) wherever
bf16 is fast, whichever dtype was asked for; any draft (a head or a causal LM), where treespec's C kernels build,
with every linear layer rounded to 4-bit codes (`INT4_DRAFT`: its decoder layers then run as one C call; it proposes
a little worse, so its levels count `ROUNDED_HEAD_COST` times their time). The draft keeps the configuration whose
draft levels are cheapest; the target the one with the best planned tokens per second (or the fastest 1-token pass
when there is no acceptance to plan with). The winner's profile, with the engine's per-step overheads, is cached
as YAML under `$TREESPEC_CACHE/profiles/` (or `$TREESPEC_PROFILES`), keyed by the
device's identity (CPU model and the ISA flags that matter, or the GPU's name), torch's version, the
thread count, fingerprints of both models' weights, their attention implementations, and the dtype and layout
asked for. A later run with the same key reuses it; any change, `remeasure=True`, or a cache file that cannot be
read measures again.

With `target_weights="auto"` (the default of `load_pair` and of `model.target_weights`) a target whose linear layers
lie on a 4-bit grid (a Q4 GGUF's, as the default target's) is also timed with those layers held as 4-bit codes
(`treespec.models.quantize.quantize_target_weights`; in fp32, its other layers in the oneDNN layout where there is
one), with its products on bf16 inputs and, where the kernels have them, on int8 inputs (`quantize.held_schemes`; int8
inputs must plan `INT8_MARGIN` times faster than bf16 ones, being a little less faithful), and held so when that
plans faster: the model then decoded is that quantized target, whose tree passes
reproduce its own one-token decoding bit for bit (`treespec.models.attention.exact_attention`).
Choosing is kept to about `max_seconds` (default 60): rounds stop early for slow models, and a model whose
1-token pass takes over 0.1 s on a CPU is timed at fewer tree sizes. The chosen configuration is then timed again
over all `repeats` rounds where the search stopped early, and that measurement is the profile trees are planned with.

Those choices are made at batch size 1. `batch_profile` measures the models as configured at other batch sizes
(t(B, n), c_B(w), the engine's overheads at B) on demand and caches that profile beside the others.
"""

from __future__ import annotations

import copy
import datetime
import hashlib
import json
import os
import platform
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import torch
import yaml

from treespec.errors import ConfigError
from treespec.models import int4_cpu, native_pass
from treespec.models.attention import attention_shape
from treespec.models.eagle_head import EagleDraftModel
from treespec.models.layer_skip import LayerSkip
from treespec.models.layouts import (
    HYBRID,
    LAYOUTS,
    ONEDNN,
    PACKED,
    extra_bytes,
    layout_name,
    linear_layout,
    onednn_available,
    packing_available,
    parse_layout,
    set_linear_layout,
)
from treespec.models.loading import attention_names, cache_root, dtype_name, to_dtype
from treespec.models.precision import BF16_HEAD, INT4_DRAFT, configure, draft_precision_name, precision_name, with_precision
from treespec.models.quantize import (
    AUTO_WEIGHTS,
    INT8_ACTIVATIONS,
    SCHEMES,
    fully_held,
    held_schemes,
    holds_int4_grid,
    int4_available,
    quantize_target_weights,
    weight_scheme,
)
from treespec.plan.costs import DRAFT_WIDTHS, LatencyProfile, measure_latency, measure_overheads
from treespec.plan.planner import plan_tree

ROUNDED_HEAD_COST = 1.25  # a draft rounded to 4 bits (INT4_DRAFT) proposes a little worse: its levels must be
# this much cheaper to be kept (the default head: 2.29 against 2.39 tokens per pass, 6 MT-Bench prompts, dynamic 6/4/3,
# greedy, AMD EPYC 2 cores avx512_bf16, 2026-12-05; its levels 0.76 against 2.1 ms)
TWO_COPY_TIE = 1.02  # a two-copy layout (hybrid, packed) planning within 2% of the best (timing noise) is preferred
PROFILE_VERSION = 11  # bump when what a profile measures changes: older cache entries are then remeasured (11: the
#   engine's overheads read against a pass of the same round, treespec.plan.costs.measure_overheads)
# A target held as 4-bit codes on int8 inputs ("int4-a8") is another model than on bf16 inputs, a little less faithful
# to the GGUF's weights (teacher-forced top-1 agreement with the fp32 model 97.58% against 99.65% for the default
# target, equal to llama.cpp's own 97.58%; [AMD EPYC, 2 cores; ISA: avx2 avx512f avx512_bf16], 2026-12-06): where both
# were timed, `hardware=auto` keeps int8 inputs only when they plan at least this many times faster
INT8_MARGIN = 1.2
ISA_FLAGS = ("avx2", "fma", "avx512f", "avx512_vnni", "avx512_bf16", "avx512_fp16", "amx_tile", "amx_bf16", "amx_int8")
CPU_SIZES = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64)
CPU_SIZES_SLOW = (1, 2, 4, 8, 16, 32)  # when a 1-token pass takes longer than SLOW_PASS_S
SLOW_PASS_S = 0.1
GPU_SIZES = (1, 2, 4, 8, 16, 32, 64, 96, 128)

Progress = Callable[[str, int, int], None]  # (what, done, total)


def _cpu_info() -> tuple[str, set[str]]:
    name, flags = platform.processor() or platform.machine(), set()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "model name" and name in ("", platform.processor() or platform.machine()):
                name = value.strip()
            elif key.strip() == "flags" and not flags:
                flags = set(value.split())
    except OSError:
        pass
    return name, flags


def device_identity(device: torch.device) -> dict[str, Any]:
    """What a timing on `device` depends on: the GPU's name, or the CPU's model and its relevant ISA flags."""
    if device.type == "cuda":
        index = device.index if device.index is not None else torch.cuda.current_device()
        return {"type": "cuda", "name": torch.cuda.get_device_name(index),
                "capability": ".".join(map(str, torch.cuda.get_device_capability(index)))}
    name, flags = _cpu_info()
    return {"type": device.type, "name": name, "isa": [f for f in ISA_FLAGS if f in flags],
            "cores": os.cpu_count()}


def describe_device(identity: dict[str, Any]) -> str:
    """One line for reports, e.g. 'cpu: Intel(R) Xeon(R) Processor (avx2 avx512f amx_bf16)'."""
    isa = identity.get("isa")
    return f"{identity['type']}: {identity['name']}" + (f" ({' '.join(isa)})" if isa else "")


def fast_bf16(device: torch.device) -> bool:
    """Whether bf16 is worth measuring here: any CUDA GPU with bf16, or a CPU with AMX or avx512_bf16."""
    if device.type == "cuda":
        return torch.cuda.is_bf16_supported()
    flags = set(device_identity(device).get("isa", []))
    return bool(flags & {"amx_bf16", "avx512_bf16"})


def vocab_fingerprint(vocab: torch.Tensor) -> str:
    """A short hash of a draft vocabulary subset's token ids [S]."""
    ids = torch.as_tensor(vocab, dtype=torch.long).cpu().numpy().tobytes()
    return f"{int(torch.as_tensor(vocab).numel())}-{hashlib.sha256(ids).hexdigest()[:12]}"


def model_fingerprint(model: torch.nn.Module) -> str:
    """A short hash of a model's config and weights (names, shapes and a strided sample of every tensor's
    values, in fp32, independent of the storage layout) and of which products take int8 activations: changes when
    the model file does."""
    digest = hashlib.sha256()
    config = getattr(model, "config", None)
    if config is not None:
        fields = {k: v for k, v in config.to_dict().items() if k not in ("_name_or_path", "dtype", "torch_dtype")}
        digest.update(json.dumps(fields, sort_keys=True, default=str).encode())
    with torch.no_grad():
        for name, tensor in sorted(model.state_dict().items()):
            digest.update(f"{name}:{tuple(tensor.shape)}".encode())
            flat = tensor.reshape(-1)
            if flat.numel() and (tensor.is_floating_point() or not tensor.dtype.is_complex):
                step = max(1, flat.numel() // 4096)
                digest.update(flat[::step].detach().to("cpu", torch.float32).numpy().tobytes())
    int8 = [name for name, module in model.named_modules() if getattr(module, "activations", None) == "int8"]
    if int8:  # products on int8 inputs (quantize.set_activations): another model's arithmetic
        digest.update(("int8 activations:" + ",".join(int8)).encode())
    return digest.hexdigest()[:20]


@dataclass(frozen=True)
class Candidate:
    """One (dtype, layout) configuration of a model and what it measured."""

    dtype: str
    layout: str
    score_ms: float  # target: planned ms per token (or 1-token pass); draft: summed draft-level ms
    profile: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class ResolvedHardware:
    """The profile a run plans with, and where it came from (for reports)."""

    profile: LatencyProfile | None
    name: str  # "auto", a named profile, or "none"
    origin: str  # "measured now (12.3 s)", "cached from <time> (<file>)", "named profile ...", "none"
    device: str  # describe_device(...)
    target_dtype: str
    target_layout: str
    draft_dtype: str | None
    draft_layout: str | None
    candidates: tuple[dict[str, Any], ...] = ()
    target_weights: str | None = None  # "int4": the target's 4-bit-grid layers held as 4-bit codes

    def models(self) -> str:
        """The models' configuration in words, e.g. "target float32 onednn (int4 codes), draft float32 onednn"."""
        line = f"target {self.target_dtype} {self.target_layout}" + (
            f" ({self.target_weights} codes)" if self.target_weights else "")
        return line + (f", draft {self.draft_dtype} {self.draft_layout}" if self.draft_dtype else "")

    def summary(self) -> dict[str, Any]:
        return {"name": self.name, "origin": self.origin, "device": self.device, "target_dtype": self.target_dtype,
                "target_layout": self.target_layout, "target_weights": self.target_weights,
                "draft_dtype": self.draft_dtype, "draft_layout": self.draft_layout, "candidates": list(self.candidates)}


def profiles_dir() -> Path:
    """Where measured profiles are cached: $TREESPEC_PROFILES, default $TREESPEC_CACHE/profiles."""
    return Path(os.environ.get("TREESPEC_PROFILES") or cache_root() / "profiles")


def _cache_path(key: dict[str, Any]) -> Path:
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:24]
    return profiles_dir() / f"{digest}.yaml"


def _read_cache(path: Path, key: dict[str, Any]) -> dict[str, Any] | None:
    """The cached entry for `key`, or None when missing, unreadable, or made for another key."""
    try:
        entry = yaml.safe_load(path.read_text())
        if not isinstance(entry, dict) or entry.get("key") != key:
            return None
        LatencyProfile.from_dict(entry["profile"])
        choice = entry["choice"]
        parse_layout(choice["target_layout"])
        if choice.get("draft_layout") is not None:
            parse_layout(choice["draft_layout"])
        to_dtype(choice["target_dtype"])
        return entry
    except (OSError, yaml.YAMLError, KeyError, TypeError, ValueError, ConfigError):
        return None


def write_cache(path: Path, entry: dict[str, Any]) -> None:
    """Write a cache entry as YAML atomically (a temporary file renamed into place)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, tmp = tempfile.mkstemp(prefix=".profile-", suffix=".yaml", dir=path.parent)
    with os.fdopen(handle, "w") as out:
        yaml.safe_dump(entry, out, sort_keys=False)
    os.replace(tmp, path)


def _variants(model: torch.nn.Module, dtypes: Sequence[str], layouts: Sequence[str],
              skipped: Callable[[str, str, ConfigError], None]):
    """Yield (dtype, layout, model) for every configuration; the fp32 original is reused, others are copies. The
    oneDNN layout's second copy must fit in half the memory available; where it does not, `skipped(dtype, layout,
    error)` is called instead."""
    for dtype in dtypes:
        if precision_name(model) == dtype:
            base = model
        else:  # a packed copy cannot be deep-copied or converted: copy the plain weights
            base = with_precision(copy.deepcopy(set_linear_layout(model, "standard")), dtype)
        for layout in layouts[:1] if dtype == INT4_DRAFT else layouts:  # 4-bit codes have no layouts
            try:
                set_linear_layout(base, layout, max_extra_bytes=_memory_budget() if layout == ONEDNN else None)
            except ConfigError as error:
                skipped(dtype, layout, error)
                continue
            yield dtype, layout, base


@torch.inference_mode()
def _one_pass_seconds(model: torch.nn.Module, prefix_len: int) -> float:
    """Rough seconds of one forward over a short sequence (after one warm-up call): to size the measurement."""
    device = next(model.parameters()).device
    ids = torch.zeros(1, min(prefix_len, 16), dtype=torch.long, device=device)
    model(input_ids=ids)
    start = time.perf_counter()
    model(input_ids=ids[:, :1])
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter() - start


def crossover(standard_ms: dict[int, float], other_ms: dict[int, float]) -> int | None:
    """The smallest measured tree size n >= 2 from which the other layout's pass was faster at every measured
    size, when the standard one was faster at some smaller size: where a two-copy layout (hybrid: standard and
    transposed; packed: standard and MKL-packed) should switch (else None)."""
    sizes = sorted(set(standard_ms) & set(other_ms))
    faster = [other_ms[n] < standard_ms[n] for n in sizes]
    start = len(sizes)
    while start > 0 and faster[start - 1]:
        start -= 1
    if start >= len(sizes) or start == 0 or sizes[start] < 2:
        return None
    return sizes[start]


def faster_window(standard_ms: dict[int, float], other_ms: dict[int, float]) -> tuple[int, int | None] | None:
    """The longest run of consecutive measured tree sizes at which the other layout's pass was faster, as (first
    size, last size or None when the run reaches the largest size measured); None when it was faster nowhere."""
    sizes = sorted(set(standard_ms) & set(other_ms))
    best, run = None, []
    for n in sizes + [None]:
        if n is not None and other_ms[n] < standard_ms[n]:
            run.append(n)
            continue
        if run and (best is None or len(run) > len(best)):
            best = run
        run = []
    if best is None:
        return None
    return best[0], None if best[-1] == sizes[-1] else best[-1]


def _memory_budget() -> int | None:
    """Half the memory this machine has available now (bytes), or None where /proc/meminfo cannot say."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024 // 2
    except OSError:
        pass
    return None


def _plan_ms_per_token(profile: LatencyProfile, acceptance) -> float:
    """Predicted ms per generated token with the best tree for `acceptance` (1-token pass without one)."""
    if acceptance is None:
        return profile.pass_ms() + profile.baseline_overhead_ms.get(1, 0.0)
    plan = plan_tree(acceptance, profile.step_costs(), max_depth_limit=8)
    return profile.pass_ms() * plan.step_cost / plan.expected_tokens


def auto_profile(
    target: torch.nn.Module,
    draft: torch.nn.Module | None,
    *,
    dtype: str = "float32",
    layout: str = "auto",
    acceptance=None,
    remeasure: bool = False,
    sizes: Sequence[int] | None = None,
    repeats: int = 5,
    warmup: int = 1,
    prefix_len: int = 400,
    max_seconds: float | None = 60.0,
    settings: dict[str, Any] | None = None,
    progress: Progress | None = None,
    draft_vocab: torch.Tensor | None = None,
    target_weights: str | None = None,
) -> tuple[torch.nn.Module, torch.nn.Module | None, ResolvedHardware]:
    """Measure (or reuse from the cache) this pair's profile on its device; return the models in the chosen
    dtype and layout, and the profile with its origin. `dtype`: a dtype name, or "auto" (fp32, plus bf16 where
    it is fast); `layout`: "standard", "transposed", "hybrid:<rows>", "packed:<rows>", "onednn" or "auto" (both
    plain layouts and, with oneDNN, "onednn" on a CPU; for the target also their hybrid where they cross over and,
    in fp32 with MKL, the packed layouts; GPUs use standard); `draft_vocab`
    [S]: the draft's levels are timed scoring only those token ids (`treespec.drafters.vocab`), a profile of its own;
    `target_weights`: "auto" also times the target with its 4-bit-grid layers held as 4-bit codes where it has
    such layers and fp32 is among the dtypes (the module docstring); None or "int4": the target as given."""
    if layout != "auto":
        parse_layout(layout)
    device = next(target.parameters()).device
    identity = device_identity(device)
    if dtype == "auto":
        dtypes = ["float32", "bfloat16"] if fast_bf16(device) else ["float32"]
    else:
        dtypes = [dtype_name(to_dtype(dtype))]
    layouts = list(LAYOUTS) if layout == "auto" and device.type == "cpu" else ["standard" if layout == "auto" else layout]
    if layout == "auto" and device.type == "cpu" and onednn_available():
        layouts.append(ONEDNN)
    if fully_held(target):
        dtypes, layouts = ["float32"], ["standard"]  # every product held as codes (the Qwen target): nothing to choose
    draft_dtypes = draft_precisions(draft, dtypes, device) if draft is not None else []
    int4_layouts = _int4_layouts(target, target_weights, dtypes, layouts)
    key = {"version": PROFILE_VERSION, "device": identity, "torch": str(torch.__version__), "threads": torch.get_num_threads(),
           "target": model_fingerprint(target), "draft": model_fingerprint(draft) if draft is not None else None,
           "dtype": dtype, "candidates": dtypes, "draft_candidates": draft_dtypes, "layout": layout, "prefix_len": prefix_len,
           "attention": attention_names(target, draft), "int4_kernel": int4_cpu.kernel_identity(),
           "native_pass": native_pass.pass_identity()}
    if draft_vocab is not None:  # only then, so that full-vocabulary profiles keep their cache keys
        key["draft_vocab"] = vocab_fingerprint(draft_vocab)
    if int4_layouts:
        key["target_weights"] = AUTO_WEIGHTS
    path = _cache_path(key)
    entry = None if remeasure else _read_cache(path, key)
    if entry is not None:
        choice = entry["choice"]
        if choice.get("target_weights"):
            target = quantize_target_weights(target, choice["target_weights"])
        target, draft = configure(target, choice["target_dtype"], choice["target_layout"]), (
            configure(draft, choice["draft_dtype"], choice["draft_layout"]) if draft is not None else None)
        origin = f"cached from {entry['measured_at']} ({path})"
        return target, draft, _resolved(LatencyProfile.from_dict(entry["profile"]), origin, identity, target, draft,
                                        entry.get("candidates", []))
    start = time.perf_counter()
    configurations = len(dtypes) * len(layouts)
    two_copy = len(layouts) > 1  # auto on a CPU: per dtype a hybrid, and in fp32 packed:1 and packed:<crossover>
    extras = (len(dtypes) + 2 * ("float32" in dtypes and packing_available())) if two_copy else 0
    if sizes is None:
        sizes = GPU_SIZES if device.type == "cuda" else CPU_SIZES
        if device.type != "cuda" and _one_pass_seconds(target, prefix_len) > SLOW_PASS_S:
            sizes = CPU_SIZES_SLOW  # a large model: fewer sizes, so that profiling stays within a minute or so
    sizes = tuple(sizes)
    common = {"prefix_len": prefix_len, "repeats": repeats, "warmup": warmup, "draft_vocab": draft_vocab,
              "max_seconds": max_seconds / (2 * configurations) if max_seconds else None}
    # a draft whose linear layers are all 4-bit (treespec.models.quantize) has no weights for a layout to store
    quantized = draft is not None and fully_held(draft)
    draft_layouts = ["standard"] if quantized else layouts
    draft_configurations = sum(1 if d == INT4_DRAFT else len(draft_layouts) for d in draft_dtypes)
    total = configurations + draft_configurations + extras + len(int4_layouts) * len(held_schemes()) + 2
    done = 0

    def tick(what: str) -> None:
        nonlocal done
        done += 1
        if progress is not None:
            progress(what, done, total)

    candidates: list[dict[str, Any]] = []
    draft_choice: tuple[float, str, str] | None = None

    def skipped(role: str):
        return lambda dtype, layout, error: tick(f"{role} {dtype} {layout}: skipped ({error})")

    if draft is not None:  # the draft's cheapest configuration, timed with the target as loaded
        for d_dtype, d_layout, variant in _variants(draft, draft_dtypes, draft_layouts, skipped("draft")):
            measured = measure_latency(target, variant, sizes=(1,), draft_widths=DRAFT_WIDTHS, **common)
            score = sum(measured.draft_ms[1].values()) * (ROUNDED_HEAD_COST if d_dtype == INT4_DRAFT else 1.0)
            candidates.append({"role": "draft", "dtype": d_dtype, "layout": d_layout, "draft_width_ms": {
                w: round(v, 3) for w, v in measured.draft_ms[1].items()}})
            if draft_choice is None or score < draft_choice[0]:
                draft_choice = (score, d_dtype, d_layout)
            tick(f"draft {d_dtype} {d_layout}")
        draft = configure(draft, draft_choice[1], draft_choice[2])
    scored: list[tuple[float, str, str, LatencyProfile, str | None]] = []  # (ms per token, dtype, layout, profile,
    plain: dict[str, LatencyProfile] = {}                                  # target weights)

    def measure_target(t_dtype: str, t_layout: str, variant: torch.nn.Module, weights: str | None = None) -> LatencyProfile:
        measured = measure_latency(variant, draft, sizes=sizes, draft_widths=DRAFT_WIDTHS if draft is not None else (),
                                   **common)
        score = _plan_ms_per_token(measured, acceptance)
        candidates.append({"role": "target", "dtype": t_dtype, "layout": t_layout, "ms_per_token": round(score, 3),
                           "target_ms": {n: round(v, 3) for n, v in measured.target_ms[1].items()},
                           **({"weights": weights} if weights else {})})
        scored.append((score, t_dtype, t_layout, measured, weights))
        tick(f"target {t_dtype} {t_layout}" + (f" {weights}" if weights else ""))
        return measured

    def measure_switched(t_dtype: str, kind: str, other: LatencyProfile, variant: torch.nn.Module) -> None:
        """The two-copy layout that uses `other`'s copy where it was faster than the standard layout: from the
        crossover on (hybrid), or over the window of sizes where packed weights were faster (packed)."""
        if kind == HYBRID:
            rows = crossover(plain["standard"].target_ms[1], other.target_ms[1])
            window = None if rows is None else (rows, None)
        else:
            window = faster_window(plain["standard"].target_ms[1], other.target_ms[1])
            if window == (1, None):
                window = None  # packed:1, measured already
        if window is None:
            tick(f"target {t_dtype}: no crossover between standard and {kind}")
        else:
            name = layout_name(kind, *window)
            measure_target(t_dtype, name, set_linear_layout(variant, name))

    for t_dtype, t_layout, variant in _variants(target, dtypes, layouts, skipped("target")):
        measured = measure_target(t_dtype, t_layout, variant)
        if t_layout in LAYOUTS:
            plain[t_layout] = measured
        if two_copy and len(plain) == len(LAYOUTS):  # both plain layouts of this dtype measured: the two-copy ones
            measure_switched(t_dtype, HYBRID, plain["transposed"], variant)
            if t_dtype == "float32" and packing_available():
                try:
                    set_linear_layout(variant, PACKED, max_extra_bytes=_memory_budget())
                except ConfigError as error:
                    tick(f"target {t_dtype} packed: skipped ({error})")
                    tick(f"target {t_dtype} packed: skipped")
                else:
                    packed = measure_target(t_dtype, layout_name(PACKED, 1), variant)
                    measure_switched(t_dtype, PACKED, packed, variant)
            plain = {}
    held: dict[str, torch.nn.Module] = {}  # per scheme, a copy whose 4-bit-grid layers are 4-bit codes; its other
    for scheme in held_schemes() if int4_layouts else ():  # layers (the LM head) take the layout
        held[scheme] = quantize_target_weights(_sharing_copy(set_linear_layout(target, "standard")), scheme)
        for t_dtype, t_layout, variant in _variants(held[scheme], ["float32"], int4_layouts,
                                                    skipped(f"target {scheme}")):
            measure_target(t_dtype, t_layout, variant, weights=scheme)
    # int8 inputs make another, slightly less faithful model: where bf16 inputs were timed too, they must win by
    # INT8_MARGIN
    ranked = [(score * (INT8_MARGIN if weights == INT8_ACTIVATIONS and "int4" in held else 1.0), *rest, weights)
              for score, *rest, weights in scored]
    # the best planned ms per token, except that a two-copy layout within TWO_COPY_TIE of it is preferred: it runs
    # the standard kernels where those were faster, so its small passes tie with standard's within timing noise,
    # and it serves larger passes (batches of trees) faster, for the memory of its second copies
    lowest = min(score for score, *_ in ranked)
    two_copy_ties = [s for s in ranked if parse_layout(s[2])[0] in (HYBRID, PACKED) and s[0] <= TWO_COPY_TIE * lowest]
    _, t_dtype, t_layout, profile, t_weights = min(two_copy_ties or ranked, key=lambda s: s[0])
    if t_weights:  # the copy measured (quantizing a 1.5B target's grids again took over a minute)
        target = held[t_weights]
    held = {}
    target = configure(target, t_dtype, t_layout)
    # where the search stopped early, the profile trees are planned with gets all `repeats` rounds: on an AMD EPYC
    # (2 cores, avx512_bf16; 2026-12-02) a t(n) left flat by a few noisy rounds planned a Sequoia tree of budget 16
    # where a remeasured profile planned budget 6, which ran 1.83x against 1.60x over transformers `generate`
    if profile.settings.get("repeats", repeats) < repeats:
        profile = measure_latency(target, draft, sizes=sizes, draft_widths=DRAFT_WIDTHS if draft is not None else (),
                                  **{**common, "max_seconds": None})
    tick("planning profile")
    overhead, baseline = measure_overheads(target, draft, profile, 1, prefix_len=prefix_len, draft_vocab=draft_vocab)
    tick("engine overhead")
    seconds = time.perf_counter() - start
    info = {**profile.settings, **(settings or {}), "machine": describe_device(identity), "layout": t_layout,
            "draft_layout": draft_choice[2] if draft_choice else None, "measured_seconds": round(seconds, 1),
            **({"draft_dtype": draft_choice[1]} if draft_choice else {}),
            "layout_extra_mb": round(extra_bytes(target) / 1e6, 1), "int4_kernel": int4_cpu.kernel_identity(),
            "native_pass": native_pass.pass_identity()}
    profile = replace(profile, overhead_ms={1: overhead}, baseline_overhead_ms={1: baseline}, settings=info)
    measured_at = datetime.datetime.now().isoformat(timespec="seconds")
    choice = {"target_dtype": t_dtype, "target_layout": t_layout, "target_weights": t_weights,
              "draft_dtype": draft_choice[1] if draft_choice else None,
              "draft_layout": draft_choice[2] if draft_choice else None}
    write_cache(path, {"key": key, "measured_at": measured_at, "choice": choice, "profile": profile.to_dict(),
                        "candidates": candidates})
    return target, draft, _resolved(profile, f"measured now ({seconds:.1f} s; cached in {path})", identity, target,
                                    draft, candidates)


def _sharing_copy(model: torch.nn.Module) -> torch.nn.Module:
    """A copy of `model`'s modules that shares its parameters and buffers: replacing the copy's layers (4-bit codes
    for the linear ones) leaves the model as it is without a second copy of its weights (a 1.5B fp32 target's 6 GB
    twice did not fit in 24 GB beside its draft's candidates)."""
    memo = {id(t): t for t in (*model.parameters(), *model.buffers())}
    return copy.deepcopy(model, memo)


def _int4_layouts(target: torch.nn.Module, target_weights: str | None, dtypes: Sequence[str],
                  layouts: Sequence[str]) -> list[str]:
    """The layouts a target held in 4 bits is timed in (its LM head's and other off-grid layers'): none unless
    `target_weights` is "auto", fp32 is a candidate, the int4 kernel runs here and the target has 4-bit-grid
    layers; otherwise oneDNN's where it is among `layouts`, else the first of them."""
    if target_weights is None or target_weights in SCHEMES:
        return []
    if target_weights != AUTO_WEIGHTS:
        raise ConfigError(f"target_weights must be {AUTO_WEIGHTS!r}, one of {SCHEMES} or None, got {target_weights!r}")
    device = next(target.parameters()).device
    if "float32" not in dtypes or not int4_available(device) or weight_scheme(target) or not holds_int4_grid(target):
        return []
    return [ONEDNN] if ONEDNN in layouts else [layouts[0]]


def draft_precisions(draft: torch.nn.Module, dtypes: Sequence[str], device: torch.device) -> list[str]:
    """The precisions a draft is timed in: `dtypes`, for an EAGLE head with fp32 among them `BF16_HEAD` where bf16
    is fast (`fast_bf16`), and for an EAGLE head or a causal LM whose head size the C pass takes, with fp32 among
    them, `INT4_DRAFT` where its layers run as one C call (treespec's kernels build here:
    `native_pass.pass_identity`) and it is not held in 4 bits already (model.draft_weights=int4)."""
    head, fp32 = isinstance(draft, EagleDraftModel), "float32" in dtypes
    extra = [BF16_HEAD] if fp32 and head and fast_bf16(device) else []
    c_shape = head or native_pass.shape_unsupported(*attention_shape(draft.config)) is None
    if fp32 and c_shape and device.type == "cpu" and native_pass.pass_identity() != "torch" and \
            weight_scheme(draft) is None:
        extra.append(INT4_DRAFT)
    return list(dtypes) + extra


def _resolved(profile: LatencyProfile, origin: str, identity: dict[str, Any], target, draft,
              candidates: Sequence[dict[str, Any]], name: str = "auto") -> ResolvedHardware:
    return ResolvedHardware(profile, name, origin, describe_device(identity), dtype_name(target), linear_layout(target),
                            draft_precision_name(draft) if draft is not None else None,
                            linear_layout(draft) if draft is not None else None, tuple(candidates),
                            weight_scheme(target))


def named_profile(target: torch.nn.Module, draft: torch.nn.Module | None, profile: LatencyProfile | None, name: str,
                  *, layout: str = "auto") -> tuple[torch.nn.Module, torch.nn.Module | None, ResolvedHardware]:
    """A profile given by name (conf/hardware/<name>.yaml) or none: nothing is measured. With layout "auto" the
    models take the layouts the profile was measured with (standard when it does not say)."""
    settings = profile.settings if profile is not None else {}
    target_layout = settings.get("layout") or "standard" if layout == "auto" else layout
    draft_layout = settings.get("draft_layout") or target_layout if layout == "auto" else layout
    set_linear_layout(target, target_layout)
    if draft is not None:
        set_linear_layout(draft, draft_layout)
    device = next(target.parameters()).device
    if profile is None:
        origin = "none (no profile: trees need an explicit budget and depth)"
    else:
        where = profile.settings.get("machine") or f"an unrecorded {profile.settings.get('device', 'device')}"
        origin = f"named profile '{name}' (measured on {where})"
    return target, draft, _resolved(profile, origin, device_identity(device), target, draft, (), name)


BATCH_PROFILE_VERSION = 4  # bump when what a batch profile measures changes (4: as PROFILE_VERSION 11)
CPU_BATCH_TREE_SIZES = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32)  # tree sizes n timed per B on a CPU
GPU_BATCH_TREE_SIZES = (1, 2, 4, 8, 16, 32, 64)


def batch_cache_key(target: torch.nn.Module, draft: torch.nn.Module | None, *, batch_sizes: Sequence[int],
                    sizes: Sequence[int], prefix_len: int, draft_vocab: torch.Tensor | None = None) -> dict[str, Any]:
    """What a profile at batch sizes B > 1 depends on: `auto_profile`'s key (device, torch, threads, models) with the
    dtype and layout the models are in, their attention implementations, and the batch sizes, tree sizes and
    prefix length measured."""
    device = next(target.parameters()).device
    model = None if isinstance(draft, LayerSkip) else draft  # a layer-skip draft is the target itself
    key = {"version": BATCH_PROFILE_VERSION, "kind": "batch", "device": device_identity(device),
           "torch": str(torch.__version__), "threads": torch.get_num_threads(),
           "target": model_fingerprint(target), "draft": model_fingerprint(model) if model is not None else None,
           "target_dtype": dtype_name(target), "target_layout": linear_layout(target),
           "draft_dtype": precision_name(model) if model is not None else None,
           "draft_layout": linear_layout(model) if model is not None else None,
           "attention": attention_names(target, model), "prefix_len": int(prefix_len),
           "batch_sizes": sorted({int(b) for b in batch_sizes}), "sizes": sorted({int(n) for n in sizes} | {1}),
           "int4_kernel": int4_cpu.kernel_identity(), "native_pass": native_pass.pass_identity()}
    if draft_vocab is not None:
        key["draft_vocab"] = vocab_fingerprint(draft_vocab)
    if model is not draft:
        key["draft"] = draft.describe()
    return key


def batch_profile(target: torch.nn.Module, draft: torch.nn.Module | None, batch_sizes: Sequence[int], *,
                  sizes: Sequence[int] | None = None, prefix_len: int = 400, repeats: int = 5, warmup: int = 1,
                  max_seconds: float | None = 120.0, remeasure: bool = False, settings: dict[str, Any] | None = None,
                  progress: Progress | None = None, draft_vocab: torch.Tensor | None = None
                  ) -> tuple[LatencyProfile, str]:
    """(the profile of these models as configured at `batch_sizes`, where it came from): cached under
    `profiles_dir()`, or measured now (t(B, n), c_B(w) for w in 1..16 and the engine's overheads for every B; the
    timed rounds stop after `max_seconds` once two were taken) and cached."""
    device = next(target.parameters()).device
    sizes = tuple(sizes or (GPU_BATCH_TREE_SIZES if device.type == "cuda" else CPU_BATCH_TREE_SIZES))
    key = batch_cache_key(target, draft, batch_sizes=batch_sizes, sizes=sizes, prefix_len=prefix_len,
                          draft_vocab=draft_vocab)
    path = profiles_dir() / f"batch-{hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:24]}.yaml"
    if not remeasure:
        try:
            entry = yaml.safe_load(path.read_text())
            if isinstance(entry, dict) and entry.get("key") == key:
                return LatencyProfile.from_dict(entry["profile"]), f"cached from {entry['measured_at']} ({path})"
        except (OSError, yaml.YAMLError, KeyError, TypeError, ValueError, ConfigError):
            pass
    start = time.perf_counter()
    total = warmup + repeats

    def tick(rep: int) -> None:
        if progress is not None:
            progress(f"batch sizes {key['batch_sizes']}", rep + 1, total)

    profile = measure_latency(target, draft, batch_sizes=key["batch_sizes"], sizes=sizes,
                              draft_widths=DRAFT_WIDTHS if draft is not None else (1,), prefix_len=prefix_len,
                              repeats=repeats, warmup=warmup, overheads=True, max_seconds=max_seconds,
                              settings={**(settings or {}), "machine": describe_device(key["device"]),
                                        "layout": key["target_layout"], "draft_layout": key["draft_layout"]},
                              progress=tick, draft_vocab=draft_vocab)
    seconds = time.perf_counter() - start
    profile = replace(profile, settings={**profile.settings, "measured_seconds": round(seconds, 1)})
    measured_at = datetime.datetime.now().isoformat(timespec="seconds")
    write_cache(path, {"key": key, "measured_at": measured_at, "profile": profile.to_dict()})
    return profile, f"measured now ({seconds:.1f} s; cached in {path})"
