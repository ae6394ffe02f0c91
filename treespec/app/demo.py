"""`python -m treespec.generate`: decode a prompt with tree speculation, streaming the answer, then report.

    python -m treespec.generate prompt="Write a function, with a docstring." max_new_tokens=200
    echo "Any text: commas, quotes, [brackets]" | python -m treespec.generate prompt=-
    python -m treespec.generate prompt_file=question.txt          # a text file is one prompt; .jsonl: one per line
    python -m treespec.generate prompt_file=prompts.jsonl batch=true  # all prompts as one batch (generate_batch)
    python -m treespec.generate tree=sequoia tree.budget=16 compare=true
    python -m treespec.generate tree=dynamic sampling=t0.7 seed=1
    python -m treespec.generate draft=ngram prompt_file=edit_me.txt      # prompt lookup: no draft model at all
    python -m treespec.generate draft=lookahead                         # lookahead decoding: no draft model either
    python -m treespec.generate draft=hybrid                            # the draft's tree and prompt lookup in one
    python -m treespec.generate --help

`prompt=` takes the rest of its argument verbatim (it is taken off the command line before Hydra reads it, so
commas, quotes, brackets and `$` are text). Configuration: conf/generate.yaml and the groups model/, tree/,
sampling/, hardware/ (default `auto`: a profile measured on this machine, see treespec.plan.hardware), runtime/.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

import torch
from omegaconf import DictConfig, OmegaConf

from treespec.api import Generation, generate_batch
from treespec.app import cli
from treespec.app.configs import (
    DecodeSpec,
    HardwareSpec,
    ModelSpec,
    SamplingSpec,
    TreeSpec,
    check_hardware,
    needs_draft_model,
    sampling_config,
)
from treespec.app.session import Session, open_session
from treespec.errors import ConfigError
from treespec.eval.data import encode_prompt, load_prompts
from treespec.models.layer_skip import LayerSkip


@dataclass
class GenerateSchema(DecodeSpec):
    prompt: str = "Explain in three sentences why the sky is blue."
    prompt_file: Optional[str] = None  # a .jsonl file (a "prompt" field per line) or a text file (one prompt)
    max_new_tokens: int = 128
    compare: bool = False  # also decode with the target alone and report the speedup
    chat: Optional[bool] = None  # None: apply the chat template when the tokenizer has one
    stream: bool = True
    batch: bool = False  # decode all prompts (prompt_file) as one batch with treespec.generate_batch


DRAFTER_NAMES = ("ngram", "lookahead", "hybrid")  # draft=<one of these> picks a drafting method instead of a draft model


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


def _command_line_overrides() -> list[str]:
    """The overrides given on the command line (none outside a Hydra run)."""
    from hydra.core.hydra_config import HydraConfig

    return list(HydraConfig.get().overrides.task) if HydraConfig.initialized() else []


def run(cfg: DictConfig) -> None:
    sampling = sampling_config(cli.to_spec(SamplingSpec, cfg.sampling))
    tree_spec, hardware_spec = cli.to_spec(TreeSpec, cfg.tree), cli.to_spec(HardwareSpec, cfg.hardware)
    draft = cfg.draft
    if draft in DRAFTER_NAMES:  # draft=ngram | lookahead | hybrid: a drafting method, not a model (tree=<it>, its
        # defaults, with the tree.* settings given on the command line)
        given = [o[len("tree."):] for o in _command_line_overrides() if o.startswith("tree.")]
        tree_spec = cli.to_spec(TreeSpec, OmegaConf.merge(OmegaConf.load(cli.CONF_DIR / "tree" / f"{draft}.yaml"),
                                                          OmegaConf.from_dotlist(given)))
        draft = cfg.model.draft
    if not cfg.batch:  # a batch plans with a profile at its batch size, checked where it is resolved
        check_hardware(tree_spec, hardware_spec)
    texts = _prompt_texts(cfg)
    needs_draft = needs_draft_model(tree_spec)
    if needs_draft and not draft:
        raise ConfigError(f"tree={tree_spec.policy} needs a draft model: set draft=<name or dir>")
    print(f"loading target {cfg.target}" + (f" and draft {draft}" if needs_draft else "") + " ...",
          file=sys.stderr, flush=True)
    session = open_session(cli.to_spec(ModelSpec, cfg.model), cli.runtime(cfg), hardware_spec, target=cfg.target,
                           draft=draft, with_draft=needs_draft, sampling=sampling, progress=cli.progress_bar())
    prompts = [encode_prompt(session.tokenizer, text, chat=cfg.chat) for text in texts]
    size = len(prompts) if cfg.batch else 1
    choice = session.policy(tree_spec, sampling, size)
    kwargs: dict[str, Any] = dict(tree=choice.policy, max_new_tokens=cfg.max_new_tokens, draft_vocab=session.draft_vocab,
                                  temperature=sampling.temperature, top_p=sampling.top_p, top_k=sampling.top_k)
    groups = [list(range(len(prompts)))] if cfg.batch else [[i] for i in range(len(prompts))]
    failed = False
    for group in groups:
        if cfg.compare and group[0] == 0:  # warm both paths up so that neither pays first-call costs in the timing
            warm = dict(kwargs, max_new_tokens=min(8, cfg.max_new_tokens))
            generate_batch(session.target, session.draft, [prompts[i] for i in group], **warm)
            generate_batch(session.target, None, [prompts[i] for i in group], **dict(warm, tree=None, draft_vocab=None))
        failed |= _decode_group(cfg, session, choice.info, texts, prompts, group, kwargs, sampling.greedy)
    if failed:
        print("error: greedy speculative output differs from the target's own", file=sys.stderr)
        sys.exit(1)


def _decode_group(cfg: DictConfig, session: Session, info: dict, texts: list[str], prompts: list[list[int]],
                  group: list[int], kwargs: dict, greedy: bool) -> bool:
    """Decode one prompt (streamed) or the whole batch, print the answers and the report; True when a greedy
    comparison found a difference."""
    tokenizer, batch = session.tokenizer, len(group) > 1 or cfg.batch
    decoder = IncrementalDecoder(tokenizer)
    if not batch and len(texts) > 1:
        print(f"\n=== prompt {group[0] + 1}/{len(texts)}: {texts[group[0]][:80]!r}")

    def stream(_: int, tokens: list[int]) -> None:
        if cfg.stream and not batch:
            print(decoder.push(tokens), end="", flush=True)

    start = time.perf_counter()
    outs = generate_batch(session.target, session.draft, [prompts[i] for i in group], seed=cfg.seed, on_tokens=stream, **kwargs)
    wall = time.perf_counter() - start
    if batch:
        for index, out in zip(group, outs):
            print(f"\n=== prompt {index + 1}/{len(texts)}: {texts[index][:80]!r}")
            print(tokenizer.decode(out.tokens, skip_special_tokens=True), flush=True)
    elif cfg.stream:
        print(decoder.flush(), flush=True)
    else:
        print(tokenizer.decode(outs[0].tokens, skip_special_tokens=True), flush=True)
    rows = _batch_rows(outs, wall, info, session) if batch else _rows(outs[0], wall, info, session, greedy, cfg)
    identical = True
    if cfg.compare:
        base_start = time.perf_counter()
        base = generate_batch(session.target, None, [prompts[i] for i in group], seed=cfg.seed,
                              **dict(kwargs, tree=None, draft_vocab=None))
        base_wall = time.perf_counter() - base_start
        base_tokens, tokens = sum(len(o.tokens) for o in base), sum(len(o.tokens) for o in outs)
        identical = [o.tokens for o in base] == [o.tokens for o in outs]
        predicted = info.get("predicted_speedup")
        what = f"batched, {base_tokens} tokens" if batch else f"{base_tokens} tokens"
        rows += [("autoregressive", f"{base_tokens / base_wall:.2f} tokens/s ({what}, {base_wall:.2f} s)"),
                 ("speedup", f"{(tokens / wall) / (base_tokens / base_wall):.2f}x"
                             + (f" (predicted {predicted:.2f}x)" if predicted and not batch else ""))]
        if greedy:
            rows.append(("outputs identical", "yes" if identical else "NO"))
    print("--- treespec report ---\n" + _report(rows), flush=True)
    return bool(cfg.compare and greedy and not identical)


def _tree_line(info: dict) -> str:
    tree = f"{info['policy']}, budget {info.get('budget')}, depth {info.get('depth')}"
    if info.get("hardware_aware"):
        if info.get("batch_size", 1) > 1:
            tree += f" (planned for batch size {info['batch_size']})"
        else:
            given = ", ".join(f"{k} {v}" for k, v in info.get("given", {}).items()) or "nothing"
            tree += f" (given: {given}; chosen by the planner: {', '.join(info.get('chosen', []))})"
    if info.get("predicted_speedup"):
        tree += f", predicted speedup {info['predicted_speedup']:.2f}x"
        if info.get("batch_size", 1) > 1:
            tree += " over batched autoregressive"
    return tree


def _batch_rows(outs: list[Generation], wall: float, info: dict, session: Session) -> list[tuple[str, str]]:
    tokens, passes = sum(len(o.tokens) for o in outs), sum(o.target_passes for o in outs)
    predicted = info.get("predicted_accepted")
    _, origin = session.profile(len(outs))
    return [("batch size", str(len(outs))), ("new tokens", f"{tokens} ({', '.join(str(len(o.tokens)) for o in outs)})"),
            ("wall time", f"{wall:.2f} s"), ("tokens/s", f"{tokens / wall:.2f} (all rows)"),
            ("target passes", str(max(o.target_passes for o in outs))),
            ("tokens per pass", f"{tokens / passes:.2f} per row" + (f" (predicted {predicted:.2f})" if predicted else "")),
            ("stop", ", ".join(o.stop_reason for o in outs)), ("tree", _tree_line(info)),
            ("device", session.hardware.device), ("batch profile", origin)]


def _rows(out: Generation, wall: float, info: dict, session: Session, greedy: bool,
          cfg: DictConfig) -> list[tuple[str, str]]:
    predicted = info.get("predicted_accepted")
    rows = [
        ("new tokens", str(len(out.tokens))),
        ("wall time", f"{wall:.2f} s"),
        ("tokens/s", f"{len(out.tokens) / wall:.2f}"),
        ("target passes", str(out.target_passes)),
        ("tokens per pass", f"{out.mean_accepted:.2f}" + (f" (predicted {predicted:.2f})" if predicted else "")),
        ("stop", out.stop_reason),
        ("tree", _tree_line(info)),
    ]
    if session.draft is not None:  # a layer-skip draft says which layers it skips
        draft = session.draft
        rows.append(("draft", draft.describe() if isinstance(draft, LayerSkip) else str(session.names["draft"])))
    if "acceptance" in info:
        source = "tree.acceptance" if cfg.tree.acceptance else f"model {session.model.name}, " + (
            "greedy" if greedy else "sampled")
        rows.append(("acceptance", f"{info['acceptance']} ({source})"))
    hardware = session.hardware
    rows.append(("device", hardware.device))
    rows.append(("dtype, layout", hardware.models()))
    profile = hardware.origin
    if hardware.profile is not None:
        profile += f"; c = {hardware.profile.draft_cost():.3f}"
    rows.append(("hardware profile", profile))
    return rows


def main() -> None:
    global _COMMAND_LINE_PROMPT
    torch.set_grad_enabled(False)
    sys.argv[1:], _COMMAND_LINE_PROMPT = take_prompt(sys.argv[1:])
    cli.run_app(run, "generate", {"generate_schema": GenerateSchema})
