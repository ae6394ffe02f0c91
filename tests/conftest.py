"""Tiny random causal LMs built from configs (no downloads), shared by the tests."""

from __future__ import annotations

import contextlib
import io
import os
import re
import runpy
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

import treespec.models.attention  # noqa: F401  (registers treespec_sdpa, the default attention)
from treespec import policies
from treespec.plan.optimizer import sequoia_tree

# Tiny models gain nothing from intra-op threads, and thread hand-offs dominate their step time.
torch.set_num_threads(1)


@pytest.fixture(scope="session", autouse=True)
def _own_profile_cache(tmp_path_factory):
    """Profiles measured by tests (hardware=auto, in-process and in subprocesses) go to a directory of the
    session's own, never into the user's cache; the dequantized default target is still shared."""
    import os

    previous = os.environ.get("TREESPEC_PROFILES")
    os.environ["TREESPEC_PROFILES"] = str(tmp_path_factory.mktemp("profiles"))
    yield
    if previous is None:
        os.environ.pop("TREESPEC_PROFILES", None)
    else:
        os.environ["TREESPEC_PROFILES"] = previous

ROOT = Path(__file__).parents[1]  # the repository
ARCHS = ("llama", "qwen2", "gpt2")
ATTNS = ("eager", "sdpa", "treespec_sdpa")


def tiny_model(arch: str = "llama", *, seed: int = 0, vocab: int = 64, layers: int = 2, hidden: int = 32,
               attn: str = "treespec_sdpa", context: int = 256, sharpness: float = 30.0):
    """A random fp32 model in eval mode. `sharpness` scales the output layer so that logits are peaked
    (random tiny models are otherwise nearly uniform, and float noise would decide argmax ties)."""
    torch.manual_seed(seed)
    common = dict(vocab_size=vocab, bos_token_id=None, eos_token_id=None, pad_token_id=None)
    if arch == "llama":
        config = LlamaConfig(hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=layers,
                             num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=context, **common)
        model = LlamaForCausalLM(config)
    elif arch == "qwen2":
        config = Qwen2Config(hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=layers,
                             num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=context,
                             use_sliding_window=False, **common)
        model = Qwen2ForCausalLM(config)
    elif arch == "gpt2":
        config = GPT2Config(n_embd=hidden, n_layer=layers, n_head=4, n_positions=context, **common)
        model = GPT2LMHeadModel(config)
    else:
        raise ValueError(arch)
    model.set_attn_implementation(attn)
    with torch.no_grad():
        model.get_output_embeddings().weight.mul_(sharpness)
    model.generation_config.eos_token_id = None
    model.generation_config.pad_token_id = 0
    return model.eval()


@pytest.fixture(scope="session")
def llama_pair():
    return tiny_model("llama", seed=0), tiny_model("llama", seed=1, layers=1)


class OneRow:
    """A row-batched drafter (treespec.drafters) driven as one sequence: root_logits(root) -> [V],
    node_logits(nodes, tokens, parents) -> [M, V], observe(outcome); `row` reads its per-row state."""

    def __init__(self, drafter):
        self.drafter = drafter

    def reset(self, prompt, prefix_features=None):
        self.drafter.reset([list(prompt)], None if prefix_features is None else prefix_features[None])

    def root_logits(self, root):
        return self.drafter.root_logits([root])[0]

    def node_logits(self, nodes, tokens, parents):
        return self.drafter.node_logits([(list(nodes), list(tokens), list(parents))])[0]

    def observe(self, outcome):
        self.drafter.observe([outcome])

    def row(self, name):
        return getattr(self.drafter, name)[0]

    def __getattr__(self, name):  # wants_target_hidden, target_layers, ...: the drafter's own
        return getattr(self.drafter, name)

    @property
    def cache(self):
        return self.drafter.cache


@dataclass
class Ran:
    """What a command-line run gave: its exit status and what it printed (as subprocess.CompletedProcess has it)."""

    returncode: int
    stdout: str
    stderr: str


def report(stdout: str) -> dict[str, str]:
    """The key: value lines after the demo's last report header (`python -m treespec.generate`)."""
    block = stdout.rsplit("--- treespec report ---", 1)[1]
    return dict(re.match(r"([^:]+):\s+(.*)", line).groups() for line in block.strip().splitlines())


def run_inprocess(target: str, args, *, module: bool = False, stdin: str = "") -> Ran:
    """Run an entry point (a script path, or a module with `module=True`, as `python -m` does) in this process, with
    `args` as its command line, standard input `stdin`, and stdout/stderr captured: the command line exactly as a
    user types it, without a fresh interpreter's seconds of imports. The process state an app changes is put back
    (working directory, environment, grad mode, torch threads)."""
    argv, cwd, env = sys.argv, os.getcwd(), dict(os.environ)
    grad, threads, stdin_stream = torch.is_grad_enabled(), torch.get_num_threads(), sys.stdin
    out, err, code = io.StringIO(), io.StringIO(), 0
    sys.argv = [target, *map(str, args)]
    sys.stdin = io.StringIO(stdin)
    os.chdir(ROOT)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            if module:
                sys.modules.pop(target, None)  # run as __main__ afresh, as `python -m` does
                runpy.run_module(target, run_name="__main__", alter_sys=True)
            else:
                runpy.run_path(str(ROOT / target), run_name="__main__")
    except SystemExit as exit_:
        code = exit_.code if isinstance(exit_.code, int) else (0 if exit_.code is None else 1)
        if not isinstance(exit_.code, (int, type(None))):
            err.write(str(exit_.code))
    finally:
        sys.argv, sys.stdin = argv, stdin_stream
        os.chdir(cwd)
        os.environ.clear()
        os.environ.update(env)
        torch.set_grad_enabled(grad)
        torch.set_num_threads(threads)
    return Ran(code, out.getvalue(), err.getvalue())


# --- shared by the engine tests of several folders ---------------------------------------------------------

PROMPTS = ([3, 17, 5, 9], [42], [7, 7, 7, 1, 2, 30, 11, 4, 60, 2, 13])


def all_policies():
    return {
        "chain": policies.Chain(4),
        "kary": policies.KAry([3, 2, 1]),
        "paths": policies.Paths([(0,), (1,), (0, 0), (0, 1), (1, 0), (0, 0, 0)]),
        "sequoia": policies.Sequoia([0.55, 0.2, 0.1, 0.05], budget=12, max_depth=5),
        "sequoia_shape": sequoia_tree([0.55, 0.2, 0.1], budget=8),
        "dynamic": policies.Dynamic(budget=10, depth=5, topk=3),
    }


def reference(target, prompt, max_new_tokens, eos=None):
    """transformers' own greedy decoding, cut after the first EOS."""
    out = target.generate(torch.tensor([prompt]), attention_mask=torch.ones(1, len(prompt), dtype=torch.long),
                          max_new_tokens=max_new_tokens, do_sample=False, eos_token_id=eos, pad_token_id=0)
    tokens = out[0, len(prompt):].tolist()
    if eos is not None and eos in tokens:
        tokens = tokens[: tokens.index(eos) + 1]
    return tokens
