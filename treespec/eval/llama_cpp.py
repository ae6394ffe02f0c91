"""llama.cpp as a baseline: plain decoding and its prompt-lookup drafting of the same GGUF, through llama-cpp-python.

What users run on a CPU is llama.cpp on the GGUF file itself, so treespec's speed is measured against it in the same
bench run, on the same prompts and threads. `make baselines` installs llama-cpp-python (it compiles llama.cpp from
source: about 10 minutes on 2 cores); without it `available()` says why and the bench leaves these methods out.

`LlamaCpp(gguf, threads)` decodes token-id prompts (the target tokenizer's ids: the GGUF's own vocabulary) greedily or
with treespec's sampling settings (temperature, top-p, top-k; llama.cpp's other samplers off), stopping after EOS or
`max_new_tokens`. `first_pass_fails` tries a GGUF in a child process first, so that a build that crashes on this CPU
is left out with one line instead. With `lookup=k` it drafts up to k tokens by prompt lookup (llama-cpp-python's
`LlamaPromptLookupDecoding`) and verifies them in one pass. `passes` counts its forward calls, the prompt's
included (that one gives the first token, as treespec's first step does).
"""

from __future__ import annotations

import importlib.util
import time
from pathlib import Path

from treespec.decode.sampling import SamplingConfig
from treespec.errors import MissingAssetError

INSTALL = "make baselines (pip install llama-cpp-python==0.3.36: compiles llama.cpp, about 10 minutes on 2 cores)"


def available() -> str | None:
    """None when llama-cpp-python can be imported, else why not (one line)."""
    if importlib.util.find_spec("llama_cpp") is None:
        return f"llama-cpp-python is not installed; run: {INSTALL}"
    try:
        import llama_cpp  # noqa: F401
    except (ImportError, OSError) as err:  # a wheel built for another CPU, a missing shared library
        return f"llama-cpp-python does not load here ({err}); reinstall with: {INSTALL}"
    return None


# a first pass of a GGUF in a child process: a build that crashes there (llama.cpp's AMX kernels on some CPUs, llama.cpp
# issue 20824) would otherwise take the whole bench down with it
_FIRST_PASS = """
import sys
from llama_cpp import Llama
model = Llama(model_path=sys.argv[1], n_ctx=64, n_threads=int(sys.argv[2]), n_threads_batch=int(sys.argv[2]),
              verbose=False)
model.eval(model.tokenize(b"Hello, world"))
"""


def first_pass_fails(gguf: str | Path, threads: int) -> str | None:
    """None when llama.cpp runs a first pass of `gguf` (in a child process, a second or two), else why not (one
    line)."""
    import signal
    import subprocess
    import sys

    try:
        done = subprocess.run([sys.executable, "-c", _FIRST_PASS, str(gguf), str(threads)], capture_output=True,
                              text=True, timeout=300, check=False)
    except subprocess.TimeoutExpired:
        return f"llama.cpp's first pass of {Path(gguf).name} did not end within 300 s"
    if done.returncode == 0:
        return None
    if done.returncode < 0:
        try:
            how = f"died of {signal.Signals(-done.returncode).name}"
        except ValueError:
            how = f"died of signal {-done.returncode}"
        return (f"llama.cpp {how} on its first pass of {Path(gguf).name} (a build with its AMX kernels does on some "
                f"CPUs, llama.cpp issue 20824); rebuild it with: pip uninstall -y llama-cpp-python && {INSTALL}, "
                "which leaves them out")
    last = (done.stderr.strip().splitlines() or ["no message"])[-1]
    return f"llama.cpp failed on its first pass of {Path(gguf).name}: {last}"


class LlamaCpp:
    """One GGUF loaded by llama.cpp; see the module docstring."""

    def __init__(self, gguf: str | Path, threads: int, *, lookup: int = 0, context: int = 4096, seed: int = 0,
                 all_logits: bool = False):
        reason = available()
        if reason is not None:
            raise MissingAssetError(reason)
        from llama_cpp import Llama

        draft = None
        if lookup:
            from llama_cpp.llama_speculative import LlamaPromptLookupDecoding

            draft = LlamaPromptLookupDecoding(num_pred_tokens=lookup)
        self.model = Llama(model_path=str(gguf), n_ctx=context, n_threads=threads, n_threads_batch=threads,
                           seed=seed, verbose=False, draft_model=draft, logits_all=all_logits or draft is not None)
        self.calls, self.first_seconds = 0, 0.0  # forward calls of the last `generate`; its first call's seconds
        evaluate = self.model.eval

        def counted(tokens):
            self.calls += 1
            if self.calls > 1:
                return evaluate(tokens)
            start = time.perf_counter()
            result = evaluate(tokens)
            self.first_seconds = time.perf_counter() - start
            return result

        self.model.eval = counted

    def top1(self, sequences, starts) -> list:
        """llama.cpp's argmax next token after each of s[p - 1 .. L - 2] for every sequence s and start p (teacher
        forcing, as treespec.eval.agreement.top1_predictions does for a torch model): [L - p] tensors. Needs the
        model loaded with `all_logits=True`."""
        import numpy as np
        import torch

        out = []
        for sequence, start in zip(sequences, starts):
            self.model.reset()
            self.model.eval(list(sequence))
            scores = np.asarray(self.model.scores[: len(sequence)])  # [L, V]
            out.append(torch.from_numpy(scores[start - 1: len(sequence) - 1].argmax(-1)))
        return out

    def generate(self, prompt: list[int], sampling: SamplingConfig, max_new_tokens: int, eos: int | None,
                 seed: int = 0) -> tuple[list[int], int]:
        """(the new tokens, up to and including EOS; forward passes, the prompt's included)."""
        self.calls = 0
        # llama-cpp-python skips the part of a prompt its cache already holds (the same prompt's earlier run, at
        # another temperature or in the warm-up): emptied, every run pays its prompt's pass, as treespec's do
        self.model.reset()
        self.model.set_seed(seed)
        options = dict(temp=0.0) if sampling.greedy else dict(temp=sampling.temperature, top_p=sampling.top_p,
                                                              top_k=sampling.top_k)
        tokens = []
        for token in self.model.generate(list(prompt), reset=True, min_p=0.0, typical_p=1.0, repeat_penalty=1.0,
                                         **{"top_k": 0, "top_p": 1.0, **options}):
            tokens.append(int(token))
            if token == eos or len(tokens) >= max_new_tokens:
                break
        return tokens, self.calls
