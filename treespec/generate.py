"""`python -m treespec.generate`: decode a prompt with tree speculation, streaming the answer, then report.

    python -m treespec.generate prompt="Write a function, with a docstring." max_new_tokens=200
    echo "Any text: commas, quotes, [brackets]" | python -m treespec.generate prompt=-
    python -m treespec.generate prompt_file=question.txt          # a text file is one prompt; .jsonl: one per line
    python -m treespec.generate prompt_file=prompts.jsonl batch=true  # all prompts as one batch (generate_batch)
    python -m treespec.generate tree=sequoia tree.budget=16 compare=true
    python -m treespec.generate tree=dynamic sampling=t0.7 seed=1
    python -m treespec.generate --help

`prompt=` takes the rest of its argument verbatim (it is taken off the command line before Hydra reads it,
so commas, quotes, brackets and `$` are text). Configuration: conf/generate.yaml and the groups model/,
tree/, sampling/, hardware/ (default `auto`: a profile measured on this machine, see treespec.hardware).
"""

from __future__ import annotations

import sys
import time
import types
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

import torch
from omegaconf import DictConfig, OmegaConf

from treespec import cli
from treespec.batch import generate_batch
from treespec.configs import (
    HardwareSpec,
    ModelSpec,
    SamplingSpec,
    TreeSpec,
    acceptance_for,
    build_batch_policy,
    build_policy,
    check_hardware,
    load_pair,
    resolve_batch_hardware,
    resolve_device,
    resolve_hardware,
    sampling_config,
    with_draft_vocab,
    with_draft_weights,
)
from treespec.data import encode_prompt, load_prompts
from treespec.engine import Generation, autoregressive, generate
from treespec.errors import ConfigError
from treespec.hardware import ResolvedHardware


@dataclass
class GenerateSchema:
    model: ModelSpec = field(default_factory=ModelSpec)
    tree: TreeSpec = field(default_factory=TreeSpec)
    sampling: SamplingSpec = field(default_factory=SamplingSpec)
    hardware: HardwareSpec = field(default_factory=HardwareSpec)
    target: str = "${model.target}"
    draft: Optional[str] = "${model.draft}"
    prompt: str = "Explain in three sentences why the sky is blue."
    prompt_file: Optional[str] = None  # a .jsonl file (a "prompt" field per line) or a text file (one prompt)
    max_new_tokens: int = 128
    seed: int = 0
    compare: bool = False  # also decode with the target alone and report the speedup
    device: str = "auto"
    dtype: str = "float32"  # float32 | bfloat16 | float16 | auto (measured: fp32 or bf16 per model)
    layout: str = "auto"  # auto (measured) | standard | transposed: how linear weights are stored on a CPU
    chat: Optional[bool] = None  # None: apply the chat template when the tokenizer has one
    stream: bool = True
    batch: bool = False  # decode all prompts (prompt_file) as one batch with treespec.generate_batch


class IncrementalDecoder:
    """Turns a growing list of token ids into text pieces, holding back incomplete UTF-8 characters."""

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer
        self.tokens: list[int] = []
        self.printed = ""

    def push(self, new_tokens: list[int]) -> str:
        self.tokens.extend(new_tokens)
        text = self.tokenizer.decode(self.tokens, skip_special_tokens=True)
        if text.endswith("\ufffd"):  # a multi-byte character is still incomplete
            return ""
        piece, self.printed = text[len(self.printed):], text
        return piece

    def flush(self) -> str:
        text = self.tokenizer.decode(self.tokens, skip_special_tokens=True)
        piece, self.printed = text[len(self.printed):], text
        return piece


def _report(rows: list[tuple[str, str]]) -> str:
    width = max(len(k) for k, _ in rows) + 2
    return "\n".join(f"{k + ':':<{width}}{v}" for k, v in rows)


_COMMAND_LINE_PROMPT: Optional[str] = None  # prompt=<text> taken off the command line by `take_prompt`


def take_prompt(argv: list[str]) -> tuple[list[str], Optional[str]]:
    """Remove `prompt=<text>` from the arguments and return (the rest, the text verbatim). Hydra's override
    grammar would read commas, quotes and brackets in it; one pair of surrounding quotes is dropped."""
    rest, text = [], None
    for arg in argv:
        key, sep, value = arg.partition("=")
        if sep and key.lstrip("+~") == "prompt":
            if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
                value = value[1:-1]
            text = value
        else:
            rest.append(arg)
    return rest, text


def _prompt_texts(cfg: DictConfig) -> list[str]:
    if cfg.prompt_file:
        path = Path(str(cfg.prompt_file)).expanduser()
        if path.suffix == ".jsonl":
            return [p.text for p in load_prompts(path)]
        if not path.is_file():
            raise ConfigError(f"prompt file not found: {path}")
        return [path.read_text()]
    text = _COMMAND_LINE_PROMPT if _COMMAND_LINE_PROMPT is not None else str(cfg.prompt)
    if text == "-":
        text = sys.stdin.read()
    if not text.strip():
        raise ConfigError('prompt is empty: pass prompt="...", prompt=- (standard input) or prompt_file=<file>')
    return [text]


def run(cfg: DictConfig) -> None:
    sampling = sampling_config(SamplingSpec(**cfg.sampling))
    model_spec = ModelSpec(**OmegaConf.to_container(cfg.model, resolve=True))
    tree_spec = TreeSpec(**OmegaConf.to_container(cfg.tree, resolve=True))
    hardware_spec = HardwareSpec(**OmegaConf.to_container(cfg.hardware, resolve=True))
    acceptance = acceptance_for(model_spec, tree_spec, sampling)
    if not cfg.batch:  # a batch plans with a batch profile, checked where it is resolved
        check_hardware(tree_spec, hardware_spec)
    texts = _prompt_texts(cfg)
    device = resolve_device(cfg.device)

    needs_draft = tree_spec.policy != "autoregressive"
    if needs_draft and not cfg.draft:
        raise ConfigError(f"tree={tree_spec.policy} needs a draft model: set draft=<name or dir>")
    print(f"loading target {cfg.target}" + (f" and draft {cfg.draft}" if needs_draft else "") + " ...",
          file=sys.stderr, flush=True)
    pair = load_pair(cfg.target, cfg.draft if needs_draft else None, device=device, dtype=cfg.dtype,
                     attn_implementation=model_spec.attn_implementation, layout=cfg.layout)
    pair = with_draft_weights(pair, model_spec.draft_weights if needs_draft else None)
    pair = with_draft_vocab(pair, model_spec.draft_vocab if needs_draft else None)
    pair = resolve_hardware(hardware_spec, pair, dtype=cfg.dtype, layout=cfg.layout, acceptance=acceptance,
                            progress=cli.progress_bar(), settings={"target": cfg.target, "draft": cfg.draft})
    hardware = pair.hardware
    if cfg.batch:
        if pair.draft_vocab is not None:
            raise ConfigError("model.draft_vocab is for one prompt at a time; the batch engine drafts the full vocabulary")
        _run_batch(cfg, pair, texts, tree_spec, acceptance, hardware_spec, sampling)
        return
    choice = build_policy(tree_spec, acceptance, hardware.profile, hardware.name)
    target, draft, tokenizer = pair.target, pair.draft, pair.tokenizer

    for index, text in enumerate(texts):
        prompt = encode_prompt(tokenizer, text, chat=cfg.chat)
        if len(texts) > 1:
            print(f"\n=== prompt {index + 1}/{len(texts)}: {text[:80]!r}")
        decoder = IncrementalDecoder(tokenizer)

        def stream(tokens: list[int], decoder=decoder) -> None:
            if cfg.stream:
                print(decoder.push(tokens), end="", flush=True)

        kwargs: dict[str, Any] = dict(max_new_tokens=cfg.max_new_tokens, temperature=sampling.temperature,
                                      top_p=sampling.top_p, top_k=sampling.top_k, seed=cfg.seed)
        if cfg.compare and index == 0:  # warm both paths up so that neither pays first-call costs in the timing
            warm = dict(kwargs, max_new_tokens=min(8, cfg.max_new_tokens))
            generate(target, draft, prompt, tree=choice.policy, draft_vocab=pair.draft_vocab, **warm)
            autoregressive(target, prompt, **warm)
        start = time.perf_counter()
        out = generate(target, draft, prompt, tree=choice.policy, streamer=stream, draft_vocab=pair.draft_vocab, **kwargs)
        wall = time.perf_counter() - start
        if cfg.stream:
            print(decoder.flush(), flush=True)
        else:
            print(tokenizer.decode(out.tokens, skip_special_tokens=True), flush=True)
        rows = _rows(out, wall, choice.info, model_spec, hardware, sampling.greedy, cfg)
        identical = True
        if cfg.compare:
            base = autoregressive(target, prompt, **kwargs)
            identical = base.tokens == out.tokens
            predicted = choice.info.get("predicted_speedup")
            rows += [("autoregressive", f"{base.tokens_per_second:.2f} tokens/s ({len(base.tokens)} tokens, "
                                        f"{base.seconds:.2f} s)"),
                     ("speedup", f"{out.tokens_per_second / base.tokens_per_second:.2f}x"
                                 + (f" (predicted {predicted:.2f}x)" if predicted else ""))]
            if sampling.greedy:
                rows.append(("outputs identical", "yes" if identical else "NO"))
        print("--- treespec report ---\n" + _report(rows), flush=True)
        if cfg.compare and sampling.greedy and not identical:
            print("error: greedy speculative output differs from the target's own", file=sys.stderr)
            sys.exit(1)


def _run_batch(cfg: DictConfig, pair, texts: list[str], tree_spec: TreeSpec, acceptance, hardware_spec: HardwareSpec,
               sampling) -> None:
    """batch=true: every prompt in one `generate_batch` call, the tree planned for that batch size; each answer,
    then one report for the batch (and, with compare, batched autoregressive decoding of the same prompts)."""
    size = len(texts)
    profile, origin = resolve_batch_hardware(hardware_spec, pair, (size,), progress=cli.progress_bar(),
                                             settings={"target": cfg.target, "draft": cfg.draft})
    choice = build_batch_policy(tree_spec, acceptance, profile, size, pair.hardware.name)
    prompts = [encode_prompt(pair.tokenizer, text, chat=cfg.chat) for text in texts]
    kwargs: dict[str, Any] = dict(max_new_tokens=cfg.max_new_tokens, temperature=sampling.temperature,
                                  top_p=sampling.top_p, top_k=sampling.top_k, seed=cfg.seed)
    if cfg.compare:  # warm both paths up so that neither pays first-call costs in the timing
        warm = dict(kwargs, max_new_tokens=min(8, cfg.max_new_tokens))
        generate_batch(pair.target, pair.draft, prompts, tree=choice.policy, **warm)
        generate_batch(pair.target, None, prompts, tree=None, **warm)
    start = time.perf_counter()
    outs = generate_batch(pair.target, pair.draft, prompts, tree=choice.policy, **kwargs)
    wall = time.perf_counter() - start
    for index, (text, out) in enumerate(zip(texts, outs)):
        print(f"\n=== prompt {index + 1}/{size}: {text[:80]!r}")
        print(pair.tokenizer.decode(out.tokens, skip_special_tokens=True), flush=True)
    tokens, passes = sum(len(o.tokens) for o in outs), sum(o.target_passes for o in outs)
    info = choice.info
    predicted = info.get("predicted_accepted")
    tree = f"{info['policy']}, budget {info.get('budget')}, depth {info.get('depth')}"
    if info.get("hardware_aware"):
        tree += f" (planned for batch size {size})"
    if info.get("predicted_speedup"):
        tree += f", predicted speedup {info['predicted_speedup']:.2f}x over batched autoregressive"
    rows = [("batch size", str(size)), ("new tokens", f"{tokens} ({', '.join(str(len(o.tokens)) for o in outs)})"),
            ("wall time", f"{wall:.2f} s"), ("tokens/s", f"{tokens / wall:.2f} (all rows)"),
            ("target passes", str(max(o.target_passes for o in outs))),
            ("tokens per pass", f"{tokens / passes:.2f} per row" + (f" (predicted {predicted:.2f})" if predicted else "")),
            ("stop", ", ".join(o.stop_reason for o in outs)), ("tree", tree), ("device", pair.hardware.device),
            ("batch profile", origin)]
    identical = True
    if cfg.compare:
        base_start = time.perf_counter()
        base = generate_batch(pair.target, None, prompts, tree=None, **kwargs)
        base_wall = time.perf_counter() - base_start
        base_tokens = sum(len(o.tokens) for o in base)
        identical = [o.tokens for o in base] == [o.tokens for o in outs]
        rows += [("autoregressive", f"{base_tokens / base_wall:.2f} tokens/s (batched, {base_tokens} tokens, "
                                    f"{base_wall:.2f} s)"),
                 ("speedup", f"{(tokens / wall) / (base_tokens / base_wall):.2f}x")]
        if sampling.greedy:
            rows.append(("outputs identical", "yes" if identical else "NO"))
    print("--- treespec report ---\n" + _report(rows), flush=True)
    if cfg.compare and sampling.greedy and not identical:
        print("error: greedy speculative output differs from the target's own", file=sys.stderr)
        sys.exit(1)


def _rows(out: Generation, wall: float, info: dict, model: ModelSpec, hardware: ResolvedHardware, greedy: bool,
          cfg: DictConfig) -> list[tuple[str, str]]:
    predicted = info.get("predicted_accepted")
    rows = [
        ("new tokens", str(len(out.tokens))),
        ("wall time", f"{wall:.2f} s"),
        ("tokens/s", f"{len(out.tokens) / wall:.2f}"),
        ("target passes", str(out.target_passes)),
        ("tokens per pass", f"{out.mean_accepted:.2f}" + (f" (predicted {predicted:.2f})" if predicted else "")),
        ("stop", out.stop_reason),
    ]
    tree = f"{info['policy']}, budget {info.get('budget')}, depth {info.get('depth')}"
    if info.get("hardware_aware"):
        given = ", ".join(f"{k} {v}" for k, v in info.get("given", {}).items()) or "nothing"
        tree += f" (given: {given}; chosen by the planner: {', '.join(info.get('chosen', []))})"
    if info.get("predicted_speedup"):
        tree += f", predicted speedup {info['predicted_speedup']:.2f}x"
    rows.append(("tree", tree))
    if "acceptance" in info:
        source = "tree.acceptance" if cfg.tree.acceptance else f"model {model.name}, {'greedy' if greedy else 'sampled'}"
        rows.append(("acceptance", f"{info['acceptance']} ({source})"))
    rows.append(("device", hardware.device))
    models = f"target {hardware.target_dtype} {hardware.target_layout}"
    if hardware.draft_dtype:
        models += f", draft {hardware.draft_dtype} {hardware.draft_layout}"
    rows.append(("dtype, layout", models))
    profile = hardware.origin
    if hardware.profile is not None:
        profile += f"; c = {hardware.profile.draft_cost:.3f}"
    rows.append(("hardware profile", profile))
    return rows


def main() -> None:
    global _COMMAND_LINE_PROMPT
    torch.set_grad_enabled(False)
    sys.argv[1:], _COMMAND_LINE_PROMPT = take_prompt(sys.argv[1:])
    cli.run_app(run, "generate", {"generate_schema": GenerateSchema})


class _CallableModule(types.ModuleType):
    """`treespec.generate` names both this CLI module and the engine's function. Importing the module makes Python
    bind it as the package attribute, shadowing the function; making the module callable keeps
    `treespec.generate(target, draft, input_ids, ...)` working whichever is bound."""

    def __call__(self, *args: Any, **kwargs: Any) -> Generation:
        return generate(*args, **kwargs)


if __name__ == "__main__":
    main()
else:
    sys.modules[__name__].__class__ = _CallableModule
