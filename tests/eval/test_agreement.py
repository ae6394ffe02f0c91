"""Teacher-forced top-1 agreement between two versions of a model, and llama.cpp's part in it when installed."""

import pytest
import torch
from conftest import tiny_model

from treespec.eval import llama_cpp
from treespec.eval.agreement import agreement, top1_predictions
from treespec.models.loading import DEFAULT_TARGET, gguf_file


def test_a_model_agrees_with_itself_and_its_predictions_are_the_argmax():
    model, other = tiny_model("llama", seed=0), tiny_model("llama", seed=4)
    sequences, starts = [[3, 17, 5, 9, 20, 4], [1, 2, 3, 4]], [2, 1]
    same = top1_predictions(model, sequences, starts)
    assert [len(p) for p in same] == [4, 3] and agreement(same, same) == 1.0
    with torch.no_grad():
        logits = model(torch.tensor([sequences[0]])).logits[0]
    assert same[0].tolist() == logits[1:5].argmax(-1).tolist()
    assert agreement(same, top1_predictions(other, sequences, starts)) < 1.0


def test_the_default_targets_gguf_is_found_and_other_models_have_none():
    assert gguf_file("tiny-random-llama") is None
    assert gguf_file(DEFAULT_TARGET).suffix == ".gguf"


def test_without_llama_cpp_python_the_reason_is_one_line(monkeypatch):
    monkeypatch.setattr(llama_cpp.importlib.util, "find_spec", lambda name: None)
    reason = llama_cpp.available()
    assert "make baselines" in reason and "\n" not in reason
    with pytest.raises(FileNotFoundError, match="make baselines"):
        llama_cpp.LlamaCpp("x.gguf", 1)


def test_a_llama_cpp_build_that_crashes_on_its_first_pass_is_left_out_with_one_line(monkeypatch):
    """The first pass runs in a child process: a crash (llama.cpp's AMX kernels on some CPUs) or an error becomes a
    one-line reason, a clean exit none."""
    import subprocess

    def finishing(code: int, stderr: str = ""):
        return lambda command, **kwargs: subprocess.CompletedProcess(command, code, "", stderr)

    monkeypatch.setattr(llama_cpp, "_FIRST_PASS", "import ctypes; ctypes.string_at(0)")  # a real crash
    reason = llama_cpp.first_pass_fails("/models/x.gguf", 2)
    assert "SIGSEGV" in reason and "x.gguf" in reason and "make baselines" in reason and "\n" not in reason
    monkeypatch.setattr(subprocess, "run", finishing(1, "Traceback ...\nValueError: bad magic"))
    assert llama_cpp.first_pass_fails("x.gguf", 2).endswith("ValueError: bad magic")
    monkeypatch.setattr(subprocess, "run", finishing(0))
    assert llama_cpp.first_pass_fails("x.gguf", 2) is None


def test_llama_cpp_times_the_prompts_pass_apart(monkeypatch):
    """The bench splits prefill from decoding: the first forward call of each `generate` (the prompt) is timed."""
    import sys
    import time
    import types

    from treespec.decode.sampling import SamplingConfig
    from treespec.eval.bench import llama_cpp_method

    class FakeLlama:  # llama-cpp-python's Llama as LlamaCpp uses it: a prompt pass, then one call per token
        def __init__(self, **_):
            pass

        cached = 0  # prompt tokens its cache holds: the real one skips them unless reset

        def set_seed(self, seed):
            pass

        def reset(self):
            self.cached = 0

        def eval(self, tokens):
            time.sleep(0.05 if len(tokens) > 1 else 0.0)

        def generate(self, tokens, reset=True, **_):
            self.eval(tokens[self.cached:])
            self.cached = len(tokens)
            while True:
                yield 5
                self.eval([5])

    monkeypatch.setattr(llama_cpp, "available", lambda: None)
    monkeypatch.setitem(sys.modules, "llama_cpp", types.SimpleNamespace(Llama=FakeLlama))
    llm = llama_cpp.LlamaCpp("x.gguf", 1)
    method = llama_cpp_method(llm, eos=None)
    for _ in range(2):  # the second run of the same prompts pays their pass again
        run = method([[1, 2, 3], [4, 5]], SamplingConfig(temperature=0.0), 0, 4)
        assert run.outputs == [[5] * 4, [5] * 4] and run.passes == 2 * 4  # the 4th token needs no call after it
        assert 0.1 <= run.prefill_seconds < 0.2
