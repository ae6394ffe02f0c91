import contextlib

import pytest
import torch

from treespec.models import int4_cpu
from treespec.models.quantize import Int4Linear, int4_grid

needs_kernel = pytest.mark.skipif(int4_cpu.kernel_unavailable() is not None,
                                  reason=f"treespec's int4 kernel cannot run here: {int4_cpu.kernel_unavailable()}")


@contextlib.contextmanager
def one_thread():
    """torch (and the kernels it hands its thread count to) on one thread within the block."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def _grid(rows: int = 48, cols: int = 96, seed: int = 0):
    weight = torch.randn(rows, cols, generator=torch.Generator().manual_seed(seed)) * 0.05
    return int4_grid(weight)


def test_the_layout_keeps_every_code_scale_and_minimum():
    codes, scale, minimum = _grid()
    packed, scale_k, minimum_k = int4_cpu.to_kernel_layout(codes, scale, minimum)
    assert packed.shape == (3, 3, 16, 16) and packed.dtype == torch.uint8
    assert torch.equal(int4_cpu.from_kernel_layout(scale_k), scale)
    assert torch.equal(int4_cpu.from_kernel_layout(minimum_k), minimum)
    # byte j of (block b, group g, pair p): column 16 b + j // 2 (low nibble) or + 8 (high nibble), k = 32 g + 2 p + j % 2
    b, g, p, j = 2, 1, 5, 7
    byte = int(packed[b, g, p, j])
    assert byte & 15 == int(codes[16 * b + j // 2, 32 * g + 2 * p + j % 2])
    assert byte >> 4 == int(codes[16 * b + 8 + j // 2, 32 * g + 2 * p + j % 2])
    with pytest.raises(ValueError, match="multiple of 16"):
        int4_cpu.to_kernel_layout(codes[:40], scale[:40], minimum[:40])
    with pytest.raises(ValueError, match="form"):
        int4_cpu.check_layout(packed, scale_k.view(torch.float32), minimum_k)
    with pytest.raises(ValueError, match="fp16's range"):  # scales and minimums are held in fp16
        int4_cpu.to_kernel_layout(codes, scale * 1e9, minimum)


@needs_kernel
def test_the_kernel_multiplies_by_the_grid_in_fp32():
    codes, scale, minimum = _grid(64, 160)
    weight = codes.double() * scale.double().repeat_interleave(32, 1) + minimum.double().repeat_interleave(32, 1)
    x = torch.randn(11, 160, generator=torch.Generator().manual_seed(1))
    out = int4_cpu.int4_matmul(x, *int4_cpu.to_kernel_layout(codes, scale, minimum))
    expected = x.to(torch.bfloat16).double() @ weight.T  # the input rounded to bf16, nothing else
    assert out.dtype == torch.float32 and out.shape == (11, 64)
    layout = int4_cpu.to_kernel_layout(codes, scale, minimum)
    assert torch.equal(int4_cpu.int4_matmul(x.to(torch.bfloat16), *layout), out)  # rounded as torch rounds
    assert (out.double() - expected).abs().max() < 1e-5 * expected.abs().max()


@needs_kernel
def test_a_rows_outputs_do_not_depend_on_the_other_rows_or_the_threads():
    layout = int4_cpu.to_kernel_layout(*_grid(80, 256, seed=2))
    x = torch.randn(21, 256, generator=torch.Generator().manual_seed(3))  # row tiles of 8, and remainders
    full = int4_cpu.int4_matmul(x, *layout)
    for rows in (1, 2, 5, 8, 9, 16, 17):
        assert torch.equal(int4_cpu.int4_matmul(x[:rows], *layout), full[:rows])
    assert torch.equal(int4_cpu.int4_matmul(x[13:14], *layout)[0], full[13])
    with one_thread():
        assert torch.equal(int4_cpu.int4_matmul(x, *layout), full)


@needs_kernel
def test_an_int4_layer_on_either_kernel_is_the_same_function_up_to_rounding():
    linear = torch.nn.Linear(96, 40, bias=True)
    mine, theirs = Int4Linear.from_linear(linear), Int4Linear.from_linear(linear, kernel="torch")
    assert (mine.kernel, theirs.kernel) == ("treespec", "torch")
    x = torch.randn(2, 5, 96)
    assert mine(x).shape == (2, 5, 40)
    assert torch.allclose(mine(x), theirs(x), atol=2e-2, rtol=2e-2)  # torch's rounds scales and outputs to bf16
    assert torch.allclose(mine(x), x @ mine.weight_fp32().T + linear.bias, atol=2e-2)
    head = mine.rows(torch.tensor([3, 0, 39]))  # a vocabulary subset keeps the kernel and the codes
    assert head.kernel == "treespec" and torch.equal(head(x), mine(x)[..., [3, 0, 39]])
    assert mine.to(torch.bfloat16).kernel_scale.dtype == torch.int16  # Module.to leaves the fp16 bits alone


def test_the_kernel_can_be_turned_off(monkeypatch):
    monkeypatch.setenv(int4_cpu.ENV, "torch")
    int4_cpu._load.cache_clear()
    int4_cpu.library.cache_clear()
    try:
        assert int4_cpu.kernel_unavailable() == f"{int4_cpu.ENV}=torch" and int4_cpu.kernel_name() == "torch"
        assert Int4Linear.from_linear(torch.nn.Linear(64, 16)).kernel == "torch"
    finally:
        monkeypatch.delenv(int4_cpu.ENV)
        int4_cpu._load.cache_clear()
        int4_cpu.library.cache_clear()


def _int6_grid(rows: int, cols: int, group: int, seed: int = 0):
    """codes 0..63 and a scale of either sign per group, as a Q6_K tensor's sub-blocks (d * sc) hold them."""
    generator = torch.Generator().manual_seed(seed)
    codes = torch.randint(0, 64, (rows, cols), generator=generator, dtype=torch.uint8)
    scale = (torch.randn(rows, cols // group, generator=generator) * 0.01).half().float()  # held in fp16
    return codes, scale


def test_the_6_bit_layout_keeps_every_code_and_scale():
    codes, scale = _int6_grid(48, 64, 16)
    packed, scale_k = int4_cpu.to_int6_layout(codes, scale)
    assert packed.shape == (3, 4, 192) and packed.dtype == torch.uint8  # six bits a weight
    b, s, v, c, t = 2, 3, 1, 11, 2  # column 16 b + c, input 16 s + 4 v + t: low bits in byte 4 c + t's high nibble
    code = int(codes[16 * b + c, 16 * s + 4 * v + t])
    assert int(packed[b, s, 4 * c + t]) >> 4 == code & 15
    assert (int(packed[b, s, 128 + 4 * c + t]) >> (2 * v)) & 3 == code >> 4  # its top two bits
    back = int4_cpu.from_int6_layout(packed, scale_k)
    assert torch.equal(back[0], codes) and torch.equal(back[1], scale)
    with pytest.raises(ValueError, match="multiple of 16"):
        int4_cpu.to_int6_layout(codes[:40], scale[:40])
    with pytest.raises(ValueError, match="group"):
        int4_cpu.to_int6_layout(codes, scale[:, :1])  # groups of 16 and 32 only


@needs_kernel
@pytest.mark.parametrize("group", [16, 32])
@pytest.mark.parametrize("activations", ["bf16", "int8"])
def test_the_6_bit_kernel_multiplies_by_the_grid_and_rows_stay_independent(group, activations):
    if activations == "int8" and int4_cpu.int8_unavailable() is not None:
        pytest.skip(f"the kernels have no int8 activations here: {int4_cpu.int8_unavailable()}")
    codes, scale = _int6_grid(80, 192, group, seed=4)
    weight = (codes.double() - 32) * scale.double().repeat_interleave(group, 1)
    layout = int4_cpu.to_int6_layout(codes, scale)
    x = torch.randn(19, 192, generator=torch.Generator().manual_seed(5))
    out = int4_cpu.int6_matmul(x, *layout, activations=activations)
    rounded = x.to(torch.bfloat16).double() if activations == "bf16" else _int8_rounded(x)
    expected = rounded @ weight.T
    assert out.shape == (19, 80) and (out.double() - expected).abs().max() < 1e-5 * expected.abs().max()
    if activations == "bf16":
        assert torch.equal(int4_cpu.int6_matmul(x.to(torch.bfloat16), *layout), out)
    for rows in (1, 3, 8, 9, 16):
        assert torch.equal(int4_cpu.int6_matmul(x[:rows], *layout, activations=activations), out[:rows])
    with one_thread():
        assert torch.equal(int4_cpu.int6_matmul(x, *layout, activations=activations), out)


needs_int8 = pytest.mark.skipif(int4_cpu.int8_unavailable() is not None,
                                reason=f"the kernels have no int8 activations here: {int4_cpu.int8_unavailable()}")


def _int8_rounded(x: torch.Tensor) -> torch.Tensor:
    """x [M, K] as the int8 form holds it (activations.h): per 32 inputs, codes round(x * 127 / amax) times amax / 127."""
    blocks = x.float().reshape(x.shape[0], -1, 32)
    amax = blocks.abs().amax(-1, keepdim=True)
    codes = torch.round(blocks * torch.where(amax > 0, 127 / amax, torch.zeros_like(amax))).clamp(-127, 127)
    return (codes.double() * (amax / 127).double()).reshape(x.shape)


@needs_int8
def test_int8_activations_multiply_the_rounded_input_by_the_grid_and_rows_stay_independent():
    codes, scale, minimum = _grid(64, 160)
    weight = codes.double() * scale.double().repeat_interleave(32, 1) + minimum.double().repeat_interleave(32, 1)
    layout = int4_cpu.to_kernel_layout(codes, scale, minimum)
    x = torch.randn(19, 160, generator=torch.Generator().manual_seed(6))
    x[3, 32:64] = 0.0  # a block of zeros: scale 0, codes 0
    out = int4_cpu.int4_matmul(x, *layout, activations="int8")
    expected = _int8_rounded(x) @ weight.T
    assert (out.double() - expected).abs().max() < 1e-5 * expected.abs().max()
    bf16 = int4_cpu.int4_matmul(x, *layout)
    assert not torch.equal(out, bf16) and (out - bf16).abs().max() < 0.05 * bf16.abs().max()  # another rounding
    assert torch.equal(int4_cpu.int4_matmul(x.to(torch.bfloat16), *layout, activations="int8"),
                       int4_cpu.int4_matmul(x.to(torch.bfloat16).float(), *layout, activations="int8"))
    for rows in (1, 2, 7, 8, 9, 16, 17):
        assert torch.equal(int4_cpu.int4_matmul(x[:rows], *layout, activations="int8"), out[:rows])
    with one_thread():
        assert torch.equal(int4_cpu.int4_matmul(x, *layout, activations="int8"), out)
    with pytest.raises(ValueError, match="activations"):
        int4_cpu.int4_matmul(x, *layout, activations="int4")


@needs_int8
def test_int8_activations_need_whole_blocks_of_32_inputs():
    short = int4_cpu.to_int6_layout(*_int6_grid(16, 48, 16))  # 48 inputs: groups of 16, no block of 32
    with pytest.raises(ValueError, match="multiple of 32"):
        int4_cpu.int6_matmul(torch.randn(2, 48), *short, activations="int8")


def _int8_grid(rows: int, cols: int, seed: int = 0):
    """(codes [rows, cols] in -128..127, both ends present, scale [rows, cols / 32], fp16 values) of an 8-bit grid."""
    generator = torch.Generator().manual_seed(seed)
    codes = torch.randint(-128, 128, (rows, cols), generator=generator, dtype=torch.int16)
    codes[0, :2] = torch.tensor([-128, 127], dtype=torch.int16)
    return codes, (torch.rand(rows, cols // 32, generator=generator) * 0.01).half().float()


def test_the_8_bit_layout_keeps_every_code_and_scale():
    codes, scale = _int8_grid(48, 96)
    packed, scale_k = int4_cpu.to_int8_layout(codes, scale)
    assert packed.dtype == torch.uint8 and packed.shape == (3, 3, 512) and scale_k.shape == (3, 3, 16)
    # column 16 b + c's code + 128 at input 32 g + 4 i + t is byte 64 i + 4 c + t of block b, group g
    assert int(packed[1, 2, 64 * 5 + 4 * 7 + 3]) == int(codes[16 + 7, 64 + 20 + 3]) + 128
    back_codes, back_scale = int4_cpu.from_int8_layout(packed, scale_k)
    assert torch.equal(back_codes, codes) and torch.equal(back_scale, scale)
    with pytest.raises(ValueError, match="multiple of 16"):
        int4_cpu.to_int8_layout(codes[:40], scale[:40])
    with pytest.raises(ValueError, match="-128..127"):
        int4_cpu.to_int8_layout(codes + 1, scale)


@needs_int8
def test_the_8_bit_kernel_multiplies_the_rounded_input_by_the_grid_and_rows_stay_independent():
    codes, scale = _int8_grid(80, 192, seed=2)
    weight = codes.double() * scale.double().repeat_interleave(32, 1)
    layout = int4_cpu.to_int8_layout(codes, scale)
    x = torch.randn(19, 192, generator=torch.Generator().manual_seed(7))
    x[4, 64:96] = 0.0  # a block of zeros: scale 0, codes 0
    out = int4_cpu.int8_matmul(x, *layout)
    assert out.shape == (19, 80) and out.dtype == torch.float32
    expected = _int8_rounded(x) @ weight.T
    assert (out.double() - expected).abs().max() < 1e-5 * expected.abs().max()
    for rows in (1, 2, 7, 8, 9, 16, 17):
        assert torch.equal(int4_cpu.int8_matmul(x[:rows], *layout), out[:rows])
    with one_thread():
        assert torch.equal(int4_cpu.int8_matmul(x, *layout), out)
    with pytest.raises(ValueError, match="8-bit weight of 192 inputs"):
        int4_cpu.int8_matmul(x[:, :160], *layout)
