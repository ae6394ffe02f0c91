"""treespec's own CPU kernels for 4-bit, 6-bit and 8-bit weights (`int4_kernel.c`, `int6_kernel.c`, `int8_kernel.c`),
built for the machine it runs on, with the decoder pass that calls them (`decoder_kernel.c`,
treespec.models.native_pass).

torch's CPU int4 kernel (`_weight_int4pack_mm_for_cpu`) converts each weight to fp32 and multiplies in fp32, so its
cost grows with every input row: on an AMD EPYC (2 cores, avx512_bf16, 2026-12-04) the 120 products of one
SmolLM2-135M pass took 4.9 / 7.1 / 12.5 / 24.5 / 349 ms for 1 / 4 / 8 / 16 / 243 rows. treespec's kernel
multiplies the 4-bit codes, exact in bf16, by the input rounded to bf16 with AVX-512 BF16 dot products (two products per
fp32 lane per instruction), and applies each group's scale and minimum to the group's sums in fp32:
4.5 / 5.6 / 7.8 / 14.3 / 168 ms for the same products, called from Python (the kernel alone, 1 and 8 rows: 3.1 and
6.5 ms). Every output element's sums run in the same order whatever the number of rows, the rows around it and the
threads, so a tree pass and a one-token pass give the same outputs bit for bit.

The C source is compiled once per machine (`-march=native`; the cache key holds the source, the compiler and the
CPU's flags) into `$TREESPEC_CACHE/kernels/` and loaded with ctypes. It needs an x86 CPU with AVX-512 BW and either
AVX-512 BF16 or AVX-512 VNNI with VBMI (without BF16 the bf16 form runs its dot products in fp32 steps and the int8
form is the fast one), or with AVX2, FMA and F16C (`avx2_kernels.c`: the same functions, layouts and row
independence, int8 products by `vpmaddubsw`; `isa` says which is built, `TREESPEC_KERNEL_ISA=avx2` asks for it), and
a C compiler (`$CC`, default `cc`); elsewhere, or with `TREESPEC_INT4_KERNEL=torch`, 4-bit layers use torch's kernel
(`kernel_unavailable` says why).

Layout (`to_kernel_layout`): codes uint8 [O / 16, I / 32, 16, 16] (two codes per byte, see the C source), scale
and minimum [O / 16, I / 32, 16] as the bits of fp16 values in int16 tensors (so that `Module.to(dtype)` leaves
them as they are); w = code * scale + minimum, codes 0..15. fp16 holds a Q4_0 / Q4_1 / Q5_0 / Q8_0 GGUF's scales
exactly and a Q4_K / Q6_K's products d * sc to within 2^-11 of each; against fp32 scales, a pass reads 14% fewer
bytes (1181 against 1374 MB for the Qwen2.5-Coder 1.5B) and took 11% less time for one token, 7% for five (AMD
EPYC, 2 cores, 2026-12-06).

The 6-bit kernel (`int6_matmul`, `to_int6_layout`) holds a GGUF's Q6_K and Q5_0 tensors: six bits per weight
(codes 0..63, w = (code - 32) * scale; a plane of low nibbles and one of top bit pairs) and an fp16 scale per 16 or
32 inputs, the codes turned into bf16 by a 64-entry table, the same row-independent sums. It lets a Q4_K_M target
(the Qwen2.5-Coder 1.5B: Q6_K v_proj and down_proj in half its layers and its LM head) run every product on
treespec's kernels, the whole pass in C.

The 8-bit kernel (`int8_matmul`, `to_int8_layout`) holds a GGUF's Q8_0 tensors (codes -128..127, one fp16 scale per 32
inputs; the default target's LM head) and takes int8 activations only: each group's integer dot product is exact, and
is scaled once (treespec.models.quantize.Int8Linear multiplies as two 4-bit planes where the inputs are bf16).

The 4-bit and 6-bit kernels also take int8 activations (`activations="int8"`; `activations.h`, where the CPU has AVX-512 VNNI and
VBMI, and in the AVX2 build: `int8_unavailable` says why not): each row's inputs rounded per 32 to int8 codes times
an fp32 scale, the group sums by `vpdpbusd` (exact in int32), the codes in the same layouts (one byte permutation per
64 weights). Rows stay independent. `treespec.models.quantize.set_activations` switches a model's layers.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import os
import platform
import shutil
import subprocess
import tempfile
from pathlib import Path

import torch

from treespec.models.host import cache_root, cpu_flags

# the sources each instruction set builds (the product kernels, the decoder pass that calls them, the cache's slot moves)
ISA_SOURCES = {
    "avx512": tuple(Path(__file__).with_name(name)
                    for name in ("int4_kernel.c", "int6_kernel.c", "int8_kernel.c", "decoder_kernel.c", "cache_moves.c")),
    "avx2": tuple(Path(__file__).with_name(name) for name in ("avx2_kernels.c", "decoder_kernel.c", "cache_moves.c")),
}
SOURCES = tuple(dict.fromkeys(source for sources in ISA_SOURCES.values() for source in sources))
# included by the sources: part of the build's cache key
HEADERS = tuple(Path(__file__).with_name(name) for name in ("row_tiles.h", "activations.h"))
KERNEL_NAME = "treespec_int4_matmul"
INT6_KERNEL_NAME = "treespec_int6_matmul"
INT8_KERNEL_NAME = "treespec_int8_matmul"
INT6_GROUPS = (16, 32)  # input weights per scale the 6-bit kernel takes (a Q6_K sub-block, a Q5_0 block)
ENV = "TREESPEC_INT4_KERNEL"  # "torch": use torch's int4 kernel even where treespec's builds
ISA_ENV = "TREESPEC_KERNEL_ISA"  # "avx2": build the AVX2 kernels even where AVX-512 ones run (tests, comparisons)
# the CPU flags each instruction set's kernels need, the fastest first; AVX-512 also needs one of its product forms
# natively (AVX512_FORMS): without either, its bf16 products run in fp32 steps, not measured against the AVX2 kernels
ISA_FLAGS = {"avx512": ("avx512bw", "avx512f"), "avx2": ("avx2", "fma", "f16c")}
AVX512_FORMS = (("avx512_bf16",), ("avx512_vnni", "avx512vbmi"))  # bf16 dot products (vdpbf16ps); int8 ones (vpdpbusd)
BLOCK = 16  # output columns per block of the layout
GROUP = 32  # input weights per scale and minimum
ACTIVATIONS = ("bf16", "int8")  # how a product takes its inputs: rounded to bf16, or to int8 with a scale per 32
# activations.h's input formats: (input dtype, activations) -> format
_X_FORMAT = {(torch.float32, "bf16"): 0, (torch.bfloat16, "bf16"): 1, (torch.float32, "int8"): 2}
X_UNSUPPORTED = -2  # a kernel's status where this build has no int8 form


def _compiler() -> str | None:
    return shutil.which(os.environ.get("CC", "cc"))


def isa() -> tuple[str | None, str | None]:
    """(the instruction set the kernels are built for here: "avx512" or "avx2", None) or (None, why none fits):
    the first of ISA_FLAGS whose flags the CPU has (for AVX-512, with one of AVX512_FORMS), or $TREESPEC_KERNEL_ISA's
    choice where the CPU allows it."""
    if platform.machine() not in ("x86_64", "AMD64"):
        return None, f"an x86-64 CPU is needed (this is {platform.machine()})"
    wanted = os.environ.get(ISA_ENV, "").lower()
    if wanted and wanted not in ISA_FLAGS:
        return None, f"{ISA_ENV}={wanted!r} is not one of {', '.join(ISA_FLAGS)}"
    for name in ISA_FLAGS:
        if wanted in ("", name) and not _lacks(name):
            return name, None
    return None, f"the CPU lacks {', '.join(_lacks(wanted or 'avx2'))}"


def _lacks(instruction_set: str) -> list[str]:
    """The CPU flags this CPU lacks for an instruction set's kernels (none: they run here)."""
    flags = cpu_flags()
    missing = [flag for flag in ISA_FLAGS[instruction_set] if flag not in flags]
    if instruction_set == "avx512" and not any(all(f in flags for f in form) for form in AVX512_FORMS):
        missing.append(" or ".join(" with ".join(form) for form in AVX512_FORMS))
    return missing


def _build(compiler: str, instruction_set: str) -> Path:
    """The kernels' shared library for this machine, compiled on first use (atomically: parallel processes may race)."""
    sources = ISA_SOURCES[instruction_set]
    version = subprocess.run([compiler, "--version"], capture_output=True, text=True, check=False).stdout
    key = hashlib.sha256("\n".join([*(source.read_text() for source in sources + HEADERS), compiler, version,
                                    instruction_set, " ".join(sorted(cpu_flags()))]).encode())
    library = cache_root() / "kernels" / f"treespec_kernels_{instruction_set}_{key.hexdigest()[:16]}.so"
    if library.is_file():
        return library
    library.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=library.parent) as scratch:
        built = Path(scratch) / library.name
        # -ffp-contract=off: decoder_kernel.c computes a * b + c as torch does, without fused multiply-adds
        command = [compiler, "-O3", "-march=native", "-ffp-contract=off", "-fopenmp", "-shared", "-fPIC",
                   *(["-DTREESPEC_AVX2"] if instruction_set == "avx2" else []), "-o", str(built),
                   *(str(source) for source in sources), "-lm"]
        result = subprocess.run(command, capture_output=True, text=True, check=False)
        if result.returncode != 0:
            raise RuntimeError(f"{' '.join(command)} failed: {result.stderr.strip()[-400:]}")
        os.replace(built, library)
    return library


@functools.cache
def library() -> tuple[ctypes.CDLL | None, str | None]:
    """(treespec's CPU kernels as a loaded library, None) or (None, why they cannot run here)."""
    if os.environ.get(ENV, "").lower() == "torch":
        return None, f"{ENV}=torch"
    instruction_set, why = isa()
    if instruction_set is None:
        return None, why
    compiler = _compiler()
    if compiler is None:
        return None, f"no C compiler ({os.environ.get('CC', 'cc')}) on PATH"
    try:
        return ctypes.CDLL(str(_build(compiler, instruction_set))), None
    except (OSError, RuntimeError) as error:
        return None, f"the kernel did not build or load: {error}"


@functools.cache
def _load() -> tuple[ctypes._CFuncPtr | None, str | None]:
    """(the 4-bit product function, None) or (None, why not)."""
    loaded, why = library()
    if loaded is None:
        return None, why
    function = getattr(loaded, KERNEL_NAME)
    function.restype = ctypes.c_int
    function.argtypes = [ctypes.c_void_p, ctypes.c_int] + [ctypes.c_void_p] * 4 + [ctypes.c_int64] * 4 + [ctypes.c_int]
    return function, None


@functools.cache
def _load_int6() -> ctypes._CFuncPtr:
    """The 6-bit product function (`int6_kernel.c`); call only where `kernel_unavailable()` is None."""
    function = getattr(library()[0], INT6_KERNEL_NAME)
    function.restype = ctypes.c_int
    function.argtypes = [ctypes.c_void_p, ctypes.c_int] + [ctypes.c_void_p] * 3 + [ctypes.c_int64] * 5 + [ctypes.c_int]
    return function


@functools.cache
def _load_int8() -> ctypes._CFuncPtr:
    """The 8-bit product function (`int8_kernel.c`); call only where `int8_unavailable()` is None."""
    function = getattr(library()[0], INT8_KERNEL_NAME)
    function.restype = ctypes.c_int
    function.argtypes = [ctypes.c_void_p] * 4 + [ctypes.c_int64] * 4 + [ctypes.c_int]
    return function


def kernel_unavailable() -> str | None:
    """Why treespec's 4-bit kernel cannot run here, or None when it can (building it on first use)."""
    return _load()[1]


def int8_unavailable() -> str | None:
    """Why the kernels cannot take int8 activations here (they need AVX-512 VNNI and VBMI), or None when they can."""
    loaded, why = library()
    if loaded is None:
        return why
    if not loaded.treespec_int8_supported():
        return "the CPU lacks avx512_vnni or avx512vbmi (the AVX-512 kernels' int8 dot products, byte permutations)"
    return None


def x_format(x: torch.Tensor, activations: str) -> tuple[torch.Tensor, int]:
    """x as a kernel takes it (contiguous; fp32 unless bf16 is kept as it is) and its activations.h format."""
    if activations not in ACTIVATIONS:
        raise ValueError(f"unknown activations {activations!r}; choose one of {ACTIVATIONS}")
    if x.dtype is not torch.float32 and (x.dtype is not torch.bfloat16 or activations == "int8"):
        x = x.float()
    return x.contiguous(), _X_FORMAT[x.dtype, activations]


def fp32_format(activations: str) -> int:
    """The activations.h format of fp32 inputs taken as `activations` (the C pass's inputs are fp32)."""
    return _X_FORMAT[torch.float32, activations]


def kernel_name() -> str:
    """Which kernel new 4-bit layers multiply with: "treespec" or "torch"."""
    return "torch" if kernel_unavailable() else "treespec"


def kernel_identity() -> str:
    """kernel_name with the instruction set treespec's kernels are built for, e.g. "treespec-avx2" (reports, caches)."""
    return "torch" if kernel_unavailable() else f"treespec-{isa()[0]}"


def half_bits(values: torch.Tensor) -> torch.Tensor:
    """Scales or minimums rounded to fp16 (to nearest even), as their bits in a contiguous int16 tensor (so that
    `Module.to(dtype)` leaves them as they are); ValueError where a value does not fit fp16's range."""
    half = values.to(torch.float16)
    if not torch.isfinite(half).all():
        raise ValueError(f"a scale or minimum of magnitude {values.abs().max().item():.3g} does not fit fp16's range")
    return half.contiguous().view(torch.int16)


def to_kernel_layout(codes: torch.Tensor, scale: torch.Tensor, minimum: torch.Tensor
                     ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """codes [O, I] uint8 (0..15), scale and minimum [O, I / 32] -> the kernel's (codes [O / 16, I / 32, 16, 16]
    uint8, scale and minimum [O / 16, I / 32, 16]: fp16 bits as int16); O a multiple of 16, I of 32."""
    rows, cols = codes.shape
    blocks, groups = rows // BLOCK, cols // GROUP
    if rows % BLOCK or cols % GROUP:
        raise ValueError(f"the 4-bit kernel needs [O, I] with O a multiple of {BLOCK} and I of {GROUP}; got {rows} x {cols}")
    # [block, column in block, group, pair, 2] -> [block, group, pair, column, 2]
    arranged = codes.reshape(blocks, BLOCK, groups, GROUP // 2, 2).permute(0, 2, 3, 1, 4)
    low = arranged[:, :, :, : BLOCK // 2].reshape(blocks, groups, GROUP // 2, BLOCK)  # columns 0..7: low nibbles
    high = arranged[:, :, :, BLOCK // 2:].reshape(blocks, groups, GROUP // 2, BLOCK)  # columns 8..15: high nibbles
    packed = (low | (high << 4)).to(torch.uint8).contiguous()

    def per_block(values: torch.Tensor) -> torch.Tensor:
        return half_bits(values.reshape(blocks, BLOCK, groups).transpose(1, 2))

    return packed, per_block(scale), per_block(minimum)


def codes_from_kernel_layout(packed: torch.Tensor) -> torch.Tensor:
    """The kernel's codes [O / 16, I / 32, 16, 16] back to codes [O, I] uint8 (the inverse of `to_kernel_layout`)."""
    blocks, groups = packed.shape[:2]
    low = (packed & 15).reshape(blocks, groups, GROUP // 2, BLOCK // 2, 2)  # columns 0..7 of each block
    high = (packed >> 4).reshape(blocks, groups, GROUP // 2, BLOCK // 2, 2)  # columns 8..15
    arranged = torch.cat([low, high], dim=3)  # [block, group, pair, column, 2]
    return arranged.permute(0, 3, 1, 2, 4).reshape(blocks * BLOCK, groups * GROUP).contiguous()


def from_kernel_layout(scale_or_minimum: torch.Tensor) -> torch.Tensor:
    """A kernel-layout scale or minimum [O / 16, I / 32, 16] back to rows [O, I / 32] fp32 (fp16 values)."""
    blocks, groups, _ = scale_or_minimum.shape
    return scale_or_minimum.view(torch.float16).float().transpose(1, 2).reshape(blocks * BLOCK, groups)


def check_layout(codes: torch.Tensor, scale: torch.Tensor, minimum: torch.Tensor) -> None:
    """ValueError unless (codes, scale, minimum) are in `to_kernel_layout`'s form, contiguous, on the CPU."""
    blocks, groups = codes.shape[:2]
    if (codes.dtype != torch.uint8 or codes.shape[2:] != (GROUP // 2, BLOCK) or scale.dtype != torch.int16
            or minimum.dtype != torch.int16 or scale.shape != (blocks, groups, BLOCK) or minimum.shape != scale.shape
            or not all(t.is_contiguous() and t.device.type == "cpu" for t in (codes, scale, minimum))):
        raise ValueError("the 4-bit kernel's codes, scales and minimums must be in to_kernel_layout's form")


def int4_matmul(x: torch.Tensor, codes: torch.Tensor, scale: torch.Tensor, minimum: torch.Tensor,
                checked: bool = False, activations: str = "bf16") -> torch.Tensor:
    """x [M, I] (fp32 or bf16; rounded to bf16, or to int8 with a scale per 32 inputs, first: `activations`) times
    the weight [O, I] in the kernel layout -> [M, O] fp32. checked: the layout was checked already (`check_layout`;
    a layer checks it once)."""
    function = _load()[0]
    if function is None:
        raise RuntimeError(f"treespec's 4-bit kernel is unavailable: {kernel_unavailable()}")
    if not checked:
        check_layout(codes, scale, minimum)
    x, form = x_format(x, activations)
    rows, cols = x.shape
    if cols != codes.shape[1] * GROUP or not x.is_cpu:
        raise ValueError(f"an input [{rows}, {cols}] on {x.device} for a 4-bit weight of {codes.shape[1] * GROUP} inputs")
    out_features = codes.shape[0] * BLOCK
    out = torch.empty(rows, out_features)
    _call(function, KERNEL_NAME, x.data_ptr(), form, codes.data_ptr(), scale.data_ptr(),
          minimum.data_ptr(), out.data_ptr(), rows, cols, out_features, out_features, torch.get_num_threads())
    return out


def _call(function, name: str, *arguments) -> None:
    """Call a product kernel, as a named range for the profiler where it runs (plan.breakdown); MemoryError when the
    kernel could not allocate its scratch buffers, RuntimeError when it has no int8 form here."""
    if torch.autograd.profiler._is_profiler_enabled:
        with torch.profiler.record_function(name):
            status = function(*arguments)
    else:
        status = function(*arguments)
    if status == X_UNSUPPORTED:
        raise RuntimeError(f"treespec's kernel {name} cannot take int8 activations here: {int8_unavailable()}")
    if status:
        raise MemoryError(f"treespec's kernel {name} could not allocate its scratch buffers")


def to_int6_layout(codes: torch.Tensor, scale: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """codes [O, I] uint8 (0..63: w = scale * (code - 32)), scale [O, I / G] (G in INT6_GROUPS) -> the 6-bit kernel's
    (codes [O / 16, I / 16, 192] uint8: six bits a weight, see int6_kernel.c; scale [O / 16, I / G, 16]: fp16 bits as
    int16); O a multiple of 16."""
    rows, cols = codes.shape
    group = cols // scale.shape[1]
    if rows % BLOCK or group not in INT6_GROUPS or cols != group * scale.shape[1] or scale.shape[0] != rows:
        raise ValueError(f"the 6-bit kernel needs codes [O, I] with O a multiple of {BLOCK} and a scale per group of "
                         f"{' or '.join(map(str, INT6_GROUPS))} inputs; got {rows} x {cols} with scale {tuple(scale.shape)}")
    # [block, column, slice, v, t] -> [block, slice, v, 4 column + t]: each slice's four vectors in lane order
    lanes = codes.reshape(rows // BLOCK, BLOCK, cols // 16, 4, 4).permute(0, 2, 3, 1, 4).reshape(
        rows // BLOCK, cols // 16, 4, 4 * BLOCK)
    low, top = lanes & 15, lanes >> 4
    packed = torch.cat([low[:, :, 0] | (low[:, :, 1] << 4), low[:, :, 2] | (low[:, :, 3] << 4),
                        top[:, :, 0] | (top[:, :, 1] << 2) | (top[:, :, 2] << 4) | (top[:, :, 3] << 6)], dim=-1)
    return packed.to(torch.uint8).contiguous(), half_bits(scale.reshape(rows // BLOCK, BLOCK, -1).transpose(1, 2))


def from_int6_layout(codes: torch.Tensor, scale: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The inverse of `to_int6_layout`: (codes [O, I] uint8, scale [O, I / G] fp32, fp16 values)."""
    blocks, slices = codes.shape[:2]
    first, second, plane = codes[..., :64], codes[..., 64:128], codes[..., 128:]
    low = torch.stack([first & 15, first >> 4, second & 15, second >> 4], dim=2)  # [block, slice, v, 64]
    top = torch.stack([(plane >> (2 * v)) & 3 for v in range(4)], dim=2)
    lanes = (low | (top << 4)).reshape(blocks, slices, 4, BLOCK, 4).permute(0, 3, 1, 2, 4)
    return (lanes.reshape(blocks * BLOCK, slices * 16).contiguous(),
            scale.view(torch.float16).float().transpose(1, 2).reshape(blocks * BLOCK, -1))


def int6_matmul(x: torch.Tensor, codes: torch.Tensor, scale: torch.Tensor, activations: str = "bf16") -> torch.Tensor:
    """x [M, I] (fp32 or bf16; rounded to bf16, or to int8 with a scale per 32 inputs, first: `activations`) times
    the weight [O, I] in `to_int6_layout`'s form -> [M, O] fp32."""
    if kernel_unavailable() is not None:
        raise RuntimeError(f"treespec's 6-bit kernel is unavailable: {kernel_unavailable()}")
    x, form = x_format(x, activations)
    rows, cols = x.shape
    if cols != codes.shape[1] * 16 or not x.is_cpu or (activations == "int8" and cols % GROUP):
        raise ValueError(f"an input [{rows}, {cols}] on {x.device} for a 6-bit weight of {codes.shape[1] * 16} inputs"
                         f"{' (int8 activations need a multiple of 32)' if activations == 'int8' else ''}")
    out_features, group = codes.shape[0] * BLOCK, cols // scale.shape[1]
    out = torch.empty(rows, out_features)
    _call(_load_int6(), INT6_KERNEL_NAME, x.data_ptr(), form, codes.data_ptr(), scale.data_ptr(),
          out.data_ptr(), rows, cols, out_features, group, out_features, torch.get_num_threads())
    return out


def to_int8_layout(codes: torch.Tensor, scale: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """codes [O, I] (integers -128..127: w = scale * code), scale [O, I / 32] -> the 8-bit kernel's (codes
    [O / 16, I / 32, 512] uint8, code + 128 in vpdpbusd's lane order, see int8_kernel.c; scale [O / 16, I / 32, 16]:
    fp16 bits as int16); O a multiple of 16, I of 32."""
    rows, cols = codes.shape
    if rows % BLOCK or cols % GROUP or scale.shape != (rows, cols // GROUP):
        raise ValueError(f"the 8-bit kernel needs codes [O, I] with O a multiple of {BLOCK}, I of {GROUP} and a scale "
                         f"per {GROUP} inputs; got {rows} x {cols} with scale {tuple(scale.shape)}")
    if int(codes.min()) < -128 or int(codes.max()) > 127:
        raise ValueError("8-bit codes must lie in -128..127")
    # [block, column, group, quad, t] -> [block, group, quad, column, t]: byte 4 column + t of each quad's 64
    lanes = (codes.to(torch.int16) + 128).to(torch.uint8).reshape(rows // BLOCK, BLOCK, cols // GROUP, GROUP // 4, 4)
    packed = lanes.permute(0, 2, 3, 1, 4).reshape(rows // BLOCK, cols // GROUP, GROUP * BLOCK).contiguous()
    return packed, half_bits(scale.reshape(rows // BLOCK, BLOCK, -1).transpose(1, 2))


def from_int8_layout(codes: torch.Tensor, scale: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The inverse of `to_int8_layout`: (codes [O, I] int16 in -128..127, scale [O, I / 32] fp32, fp16 values)."""
    blocks, groups = codes.shape[:2]
    lanes = codes.reshape(blocks, groups, GROUP // 4, BLOCK, 4).permute(0, 3, 1, 2, 4)
    return (lanes.reshape(blocks * BLOCK, groups * GROUP).to(torch.int16) - 128,
            scale.view(torch.float16).float().transpose(1, 2).reshape(blocks * BLOCK, groups))


def int8_matmul(x: torch.Tensor, codes: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """x [M, I] (rounded to int8 with a scale per 32 inputs first: int8 activations, the only form this kernel takes)
    times the weight [O, I] in `to_int8_layout`'s form -> [M, O] fp32."""
    if int8_unavailable() is not None:
        raise RuntimeError(f"treespec's 8-bit kernel is unavailable: {int8_unavailable()}")
    x, form = x_format(x, "int8")
    rows, cols = x.shape
    if cols != codes.shape[1] * GROUP or not x.is_cpu:
        raise ValueError(f"an input [{rows}, {cols}] on {x.device} for an 8-bit weight of {codes.shape[1] * GROUP} "
                         "inputs")
    out_features = codes.shape[0] * BLOCK
    out = torch.empty(rows, out_features)
    _call(_load_int8(), INT8_KERNEL_NAME, x.data_ptr(), codes.data_ptr(), scale.data_ptr(), out.data_ptr(), rows,
          cols, out_features, out_features, torch.get_num_threads())
    return out
