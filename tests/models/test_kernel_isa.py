"""treespec's kernels come in two instruction sets (AVX-512: int4_kernel.c, int6_kernel.c, int8_kernel.c; AVX2:
avx2_kernels.c). The suite runs whichever this CPU picks; these tests also run the AVX2 build where the CPU would
pick AVX-512, so that both stay tested whatever machine runs the suite."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from treespec.models import int4_cpu
from treespec.models.quantize import int4_grid

ROOT = Path(__file__).resolve().parents[2]
avx2_is_not_native = pytest.mark.skipif(
    int4_cpu.isa()[0] != "avx512" or not all(flag in int4_cpu.cpu_flags() for flag in int4_cpu.ISA_FLAGS["avx2"]),
    reason="the suite runs the AVX2 kernels itself here, or the CPU cannot run them")


def test_the_instruction_set_is_the_fastest_the_cpu_has_or_the_one_asked_for(monkeypatch):
    monkeypatch.setattr(int4_cpu.platform, "machine", lambda: "x86_64")
    monkeypatch.delenv(int4_cpu.ISA_ENV, raising=False)
    flags = {"avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512_bf16"}
    monkeypatch.setattr(int4_cpu, "cpu_flags", lambda: flags)
    assert int4_cpu.isa() == ("avx512", None)
    monkeypatch.setenv(int4_cpu.ISA_ENV, "avx2")
    assert int4_cpu.isa() == ("avx2", None)
    monkeypatch.setenv(int4_cpu.ISA_ENV, "sse")
    assert int4_cpu.isa()[0] is None and "not one of avx512, avx2" in int4_cpu.isa()[1]
    monkeypatch.delenv(int4_cpu.ISA_ENV)
    monkeypatch.setattr(int4_cpu, "cpu_flags", lambda: {"avx2", "fma", "f16c"})
    assert int4_cpu.isa() == ("avx2", None)
    monkeypatch.setenv(int4_cpu.ISA_ENV, "avx512")
    assert int4_cpu.isa() == (None, "the CPU lacks avx512bw, avx512f, avx512_bf16 or avx512_vnni with avx512vbmi")
    monkeypatch.setenv(int4_cpu.ISA_ENV, "")
    # AVX-512 without bf16 dot products: its int8 form (VNNI) beat the AVX2 build past one row (docs/hardware.md);
    # with neither product form, AVX2
    monkeypatch.setattr(int4_cpu, "cpu_flags", lambda: {"avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512_vnni",
                                                        "avx512vbmi"})
    assert int4_cpu.isa() == ("avx512", None)
    monkeypatch.setattr(int4_cpu, "cpu_flags", lambda: {"avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512_vnni"})
    assert int4_cpu.isa() == ("avx2", None)
    monkeypatch.delenv(int4_cpu.ISA_ENV)
    monkeypatch.setattr(int4_cpu, "cpu_flags", lambda: {"avx", "sse4_2"})
    assert int4_cpu.isa() == (None, "the CPU lacks avx2, fma, f16c")
    monkeypatch.setattr(int4_cpu.platform, "machine", lambda: "aarch64")
    assert "x86-64" in int4_cpu.isa()[1]


def _run_with_avx2(arguments: list[str], tmp_path: Path) -> subprocess.CompletedProcess:
    environment = {**os.environ, int4_cpu.ISA_ENV: "avx2", "TREESPEC_CACHE": str(tmp_path / "cache")}
    return subprocess.run([sys.executable, *arguments], cwd=ROOT, env=environment, capture_output=True, text=True,
                          timeout=600, check=False)


@avx2_is_not_native
def test_the_avx2_kernels_pass_the_kernel_and_pass_tests(tmp_path):
    result = _run_with_avx2(["-m", "pytest", "-q", "-p", "no:xdist", "-p", "no:cacheprovider", "-rs",
                             "tests/models/test_int4_cpu.py", "tests/models/test_native_pass.py",
                             "tests/models/test_int8_head.py"], tmp_path)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    assert "passed" in result.stdout and "cannot run here" not in result.stdout and "no int8" not in result.stdout


@avx2_is_not_native
@pytest.mark.skipif(int4_cpu.int8_unavailable() is not None, reason="the AVX-512 kernels have no int8 form here")
def test_int8_products_are_the_same_bits_in_both_instruction_sets(tmp_path):
    """The int8 forms sum the same integers exactly and share their fp32 epilogue: equal outputs, bit for bit."""
    generator = torch.Generator().manual_seed(3)
    codes, scale, minimum = int4_grid(torch.randn(48, 256, generator=generator) * 0.05)
    six = torch.randint(0, 64, (32, 256), generator=generator, dtype=torch.uint8)
    six_scale = torch.rand(32, 16, generator=generator) * 0.01
    eight = torch.randint(-128, 128, (32, 256), generator=generator, dtype=torch.int16)
    eight_scale = torch.rand(32, 8, generator=generator) * 0.01
    x = torch.randn(5, 256, generator=generator)
    torch.save({"layout": int4_cpu.to_kernel_layout(codes, scale, minimum),
                "six": int4_cpu.to_int6_layout(six, six_scale), "eight": int4_cpu.to_int8_layout(eight, eight_scale),
                "x": x}, tmp_path / "inputs.pt")
    script = (
        "import sys, torch\n"
        "from treespec.models import int4_cpu\n"
        "assert int4_cpu.isa()[0] == 'avx2'\n"
        "d = torch.load(sys.argv[1])\n"
        "torch.save([int4_cpu.int4_matmul(d['x'], *d['layout'], activations='int8'),\n"
        "            int4_cpu.int6_matmul(d['x'], *d['six'], activations='int8'),\n"
        "            int4_cpu.int8_matmul(d['x'], *d['eight'])], sys.argv[2])\n")
    result = _run_with_avx2(["-c", script, str(tmp_path / "inputs.pt"), str(tmp_path / "out.pt")], tmp_path)
    assert result.returncode == 0, result.stderr[-2000:]
    four, six_out, eight_out = torch.load(tmp_path / "out.pt")
    layout = int4_cpu.to_kernel_layout(codes, scale, minimum)
    assert torch.equal(four, int4_cpu.int4_matmul(x, *layout, activations="int8"))
    assert torch.equal(six_out, int4_cpu.int6_matmul(x, *int4_cpu.to_int6_layout(six, six_scale), activations="int8"))
    assert torch.equal(eight_out, int4_cpu.int8_matmul(x, *int4_cpu.to_int8_layout(eight, eight_scale)))
