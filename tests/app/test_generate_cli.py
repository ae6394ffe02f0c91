"""`python -m treespec.generate` end to end on tiny models: streamed output, report, compare, errors."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import report, run_inprocess

from treespec.app.demo import IncrementalDecoder
from treespec.models import DEFAULT_TARGET, load_tokenizer

ROOT = Path(__file__).parents[2]
TINY = ["model=tiny", "hardware=none"]


def run_cli(*args, env=None, stdin=""):
    """`python -m treespec.generate <args>`, run in this process (conftest.run_inprocess); one test below runs it
    as a real process, with a pipe for standard input."""
    saved = dict(os.environ)
    os.environ.update(env or {})
    try:
        return run_inprocess("treespec.generate", args, module=True, stdin=stdin)
    finally:
        os.environ.clear()
        os.environ.update(saved)




def test_greedy_compare_reports_identical_outputs():
    result = run_cli(*TINY, "tree=chain", "tree.k=3", "compare=true", "max_new_tokens=16", "prompt=Hello there")
    assert result.returncode == 0, result.stderr
    rows = report(result.stdout)
    assert rows["new tokens"] == "16" and rows["stop"] == "max_new_tokens"
    passes = int(rows["target passes"])
    assert float(rows["tokens per pass"].split()[0]) == pytest.approx(16 / passes, abs=0.01)
    assert "(predicted" in rows["tokens per pass"]
    assert rows["tree"].startswith("chain, budget 4, depth 4")
    assert rows["outputs identical"] == "yes" and rows["speedup"].endswith("x")


def test_sequoia_hardware_aware_choice_and_sampling(tmp_path):
    (tmp_path / "hardware").mkdir()
    (tmp_path / "hardware" / "made_up.yaml").write_text(
        "name: made-up\ntarget_ms: {1: 10.0, 4: 11.0, 8: 13.0, 16: 20.0}\ndraft_ms: 1.0\n")
    result = run_cli("model=tiny", "tree=sequoia", "sampling=t0.7", "seed=1", "max_new_tokens=12",
                     f"hydra.searchpath=[file://{tmp_path}]", "hardware=made_up")
    assert result.returncode == 0, result.stderr
    rows = report(result.stdout)
    assert "chosen by the planner: budget, max_depth" in rows["tree"] and "predicted speedup" in rows["tree"]
    assert rows["hardware profile"].startswith("named profile 'made-up'") and "c = 0.100" in rows["hardware profile"]
    assert rows["acceptance"].endswith("(model tiny, sampled)")


def test_adaptive_tree_from_the_command_line():
    result = run_cli(*TINY, "tree=adaptive", "tree.max_depth=5", "tree.threshold=0.2", "compare=true",
                     "max_new_tokens=10")
    assert result.returncode == 0, result.stderr
    rows = report(result.stdout)
    assert rows["tree"].startswith("adaptive, budget 5, depth 5") and rows["outputs identical"] == "yes"


def test_dynamic_tree_and_prompt_file(tmp_path):
    prompts = tmp_path / "p.jsonl"
    prompts.write_text('{"prompt": "One"}\n{"prompt": "Two"}\n')
    result = run_cli(*TINY, "tree=dynamic", f"prompt_file={prompts}", "max_new_tokens=6", "stream=false")
    assert result.returncode == 0, result.stderr
    assert result.stdout.count("--- treespec report ---") == 2 and "=== prompt 2/2" in result.stdout
    assert report(result.stdout)["tree"].startswith("dynamic, budget 10, depth 6")


@pytest.mark.parametrize("drafter", ["ngram", "lookahead"])
def test_model_free_drafters_from_the_command_line(drafter):
    result = run_cli(*TINY, f"draft={drafter}", "compare=true", "max_new_tokens=12", "prompt=a b a b a b")
    assert result.returncode == 0, result.stderr
    rows = report(result.stdout)
    assert rows["tree"].startswith(drafter) and rows["outputs identical"] == "yes"
    assert "loading target" in result.stderr and "and draft" not in result.stderr  # no draft model loaded


def test_a_hybrid_tree_from_the_command_line():
    result = run_cli(*TINY, "draft=hybrid", "tree.model_policy=dynamic", "tree.budget=4", "tree.max_depth=3",
                     "compare=true", "max_new_tokens=12", "prompt=a b a b a b")
    assert result.returncode == 0, result.stderr
    rows = report(result.stdout)
    assert rows["tree"].startswith("hybrid") and rows["outputs identical"] == "yes"


@pytest.mark.parametrize("args, message", [
    (["tree.budgett=3"], "Could not override 'tree.budgett'"),
    (["tree=nope"], "Could not find 'tree/nope'"),
    (["max_new_tokens=lots"], "max_new_tokens"),
    (["tree=chain", "target=/no/such/model"], "no model directory"),
    (["tree=chain", "prompt_file=/no/such/file.jsonl"], "prompt file not found"),
    (["tree=chain", "sampling.top_p=1.5"], "top_p"),
    (["tree=sequoia"], "needs a measured hardware profile"),
    (["draft=hybrid"], "tree.model_policy=dynamic"),  # its model part is planned: the way out without a profile
    (["tree=chain", "prompt_file=/no/such/file.txt"], "prompt file not found"),
    (["tree=chain", "prompt=   "], "prompt is empty"),
])
def test_bad_input_is_one_line_and_status_2(args, message):
    result = run_cli(*TINY, *args, "max_new_tokens=4")
    assert result.returncode == 2, (result.stdout, result.stderr)
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and message in errors[0], result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize("text", ["Write a function, with a docstring.", "a=b, c='d' [e] {f} ${g} \\h"])
def test_any_prompt_text_is_accepted(text):
    result = run_cli(*TINY, "tree=chain", "max_new_tokens=4", f"prompt={text}")
    assert result.returncode == 0, result.stderr


def test_prompt_from_standard_input_and_from_a_text_file(tmp_path):
    """As a real process: `python -m treespec.generate prompt=-` reads the prompt from a pipe."""
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    piped = subprocess.run([sys.executable, "-m", "treespec.generate", *TINY, "tree=chain", "max_new_tokens=4",
                            "prompt=-"], input="Hello, world: [1, 2]\n", capture_output=True, text=True, timeout=300,
                           cwd=ROOT, env=env)
    assert piped.returncode == 0, piped.stderr
    question = tmp_path / "question.txt"
    question.write_text("A question, with commas,\nover two lines.")
    from_file = run_cli(*TINY, "tree=chain", "max_new_tokens=4", f"prompt_file={question}")
    assert from_file.returncode == 0 and from_file.stdout.count("--- treespec report ---") == 1, from_file.stderr


def test_take_prompt_keeps_the_text_verbatim():
    from treespec.app.demo import take_prompt

    rest, text = take_prompt(["tree=chain", "prompt=Write a function, with a docstring.", "seed=1"])
    assert rest == ["tree=chain", "seed=1"] and text == "Write a function, with a docstring."
    assert take_prompt(["prompt='quoted, text'"])[1] == "quoted, text"
    assert take_prompt(["+prompt=x=y"])[1] == "x=y" and take_prompt(["seed=1"]) == (["seed=1"], None)


def test_the_report_names_the_machine_and_the_profile_origin(tmp_path):
    env = {"TREESPEC_PROFILES": str(tmp_path)}
    args = ["model=tiny", "tree=chain", "max_new_tokens=4", "hardware.repeats=1", "hardware.prefix_len=16"]
    first, second = (run_cli(*args, env=env) for _ in range(2))
    assert first.returncode == 0 and second.returncode == 0, (first.stderr, second.stderr)
    rows, again = report(first.stdout), report(second.stdout)
    assert rows["hardware profile"].startswith("measured now") and again["hardware profile"].startswith("cached from")
    assert rows["device"].startswith("cpu") and rows["device"] == again["device"]
    layout = r"(standard|transposed|onednn|hybrid:\d+|packed:\d+(-\d+)?)"  # whichever this machine measured fastest
    assert re.match(rf"target float32 {layout}, draft float32 (standard|transposed|onednn)$", rows["dtype, layout"])
    assert rows["dtype, layout"] == again["dtype, layout"]


def test_tokenizer_mismatch(tmp_path):
    from treespec.models import load_model

    draft = load_model("tiny-random-llama-draft")
    tokenizer = load_tokenizer(DEFAULT_TARGET)
    tokenizer.add_tokens(["<not-in-the-target>"])
    draft.save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    result = run_cli(*TINY, "tree=chain", f"draft={tmp_path}", "max_new_tokens=4")
    assert result.returncode == 2 and "differs from the target's" in result.stderr


def test_help_lists_the_options():
    result = run_cli("--help")
    assert result.returncode == 0
    for word in ("tree:", "sampling:", "model:", "max_new_tokens", "compare", "prompt_file", "tree=dynamic"):
        assert word in result.stdout, word


def test_incremental_decoding_never_splits_characters():
    tokenizer = load_tokenizer(DEFAULT_TARGET)
    text = "Grüße aus Köln 🙂🎉 — naïve café ✓"
    ids = tokenizer(text)["input_ids"]
    decoder = IncrementalDecoder(tokenizer)
    pieces = [decoder.push([t]) for t in ids] + [decoder.flush()]
    assert all("\ufffd" not in piece for piece in pieces)
    assert "".join(pieces) == tokenizer.decode(ids)
    assert sum(1 for p in pieces if p == "") > 0  # some tokens were held back mid-character


def test_importing_the_cli_module_keeps_the_generate_function_callable():
    import importlib

    import treespec
    from treespec import api, models

    importlib.import_module("treespec.generate")  # binds the module as treespec.generate
    target = models.load_model("tiny-random-llama")
    draft = models.load_model("tiny-random-llama-draft")
    via_package = treespec.generate(target, draft, [1, 5, 9], tree=treespec.policies.Chain(3), max_new_tokens=6)
    direct = api.generate(target, draft, [1, 5, 9], tree=treespec.policies.Chain(3), max_new_tokens=6)
    assert via_package.tokens == direct.tokens and len(direct.tokens) == 6


def test_prompt_file_as_one_batch(tmp_path):
    prompts = tmp_path / "p.jsonl"
    prompts.write_text('{"prompt": "One"}\n{"prompt": "Two, longer"}\n{"prompt": "Three"}\n')
    result = run_cli(*TINY, "tree=chain", "tree.k=2", f"prompt_file={prompts}", "batch=true", "compare=true",
                     "max_new_tokens=6")
    assert result.returncode == 0, result.stderr
    assert result.stdout.count("--- treespec report ---") == 1 and "=== prompt 3/3" in result.stdout
    rows = report(result.stdout)
    assert rows["batch size"] == "3" and rows["new tokens"].startswith("18 (6, 6, 6)")
    assert rows["outputs identical"] == "yes" and rows["tree"].startswith("chain, budget 3")
    assert rows["batch profile"].startswith("none")
    planned = run_cli(*TINY, "tree=sequoia", f"prompt_file={prompts}", "batch=true", "max_new_tokens=4")
    assert planned.returncode == 2 and "profile at batch size 3" in planned.stderr
