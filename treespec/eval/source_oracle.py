"""The most a tree that mixes drafting sources could save: every source's acceptance at every position of the
target's greedy text, and the passes a decode needs when each pass takes the best source there.

`step_lengths` runs one speculative step of a tree policy from every position i of a reference continuation (the
prompt plus the reference's first i tokens as the context) and records the tokens that step adds: accepted drafts
plus the bonus. `passes_needed` walks a reference with such lengths: a pass at position i moves to i + length[i].
`best_of` takes the longest of several sources' lengths at each position: a decode whose tree always held the
winning source's branch, at no extra cost of rows or drafting, which bounds from above what mixing those sources
can save over the best of them alone. Greedy only: the reference is the target's own greedy text, and every step
must reproduce it (a step that does not is an engine error and raises).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import torch
from transformers import PreTrainedModel

from treespec.api import generate_batch


def passes_needed(lengths: Sequence[int]) -> int:
    """Target passes a greedy decode of len(lengths) tokens takes when a pass that starts at position i adds
    lengths[i] tokens (a pass adds at least one)."""
    position = passes = 0
    while position < len(lengths):
        position += max(1, int(lengths[position]))
        passes += 1
    return passes


def best_of(lengths_by_source: Mapping[str, Sequence[int]]) -> list[int]:
    """The longest step among the sources at each position (all the sources' lists cover the same positions)."""
    columns = list(lengths_by_source.values())
    if len({len(c) for c in columns}) > 1:
        raise ValueError("every source's step lengths must cover the same positions")
    return [max(at) for at in zip(*columns)]


def step_lengths(target: PreTrainedModel, draft: PreTrainedModel | None, prompt: Sequence[int],
                 reference: Sequence[int], policy, *, longest: int, draft_vocab: torch.Tensor | None = None,
                 progress: Callable[[], None] | None = None) -> list[int]:
    """The tokens one greedy step of `policy` adds from each position of `reference` (the target's greedy
    continuation of `prompt`), at most `longest` (set it above the policy's deepest tree). One prefill per
    position: len(reference) decodes of one step."""
    reference = [int(t) for t in reference]
    lengths = []
    for position in range(len(reference)):
        generation = generate_batch(target, draft, [list(prompt) + reference[:position]], tree=policy,
                                    draft_vocab=draft_vocab, max_new_tokens=min(longest, len(reference) - position))[0]
        if generation.tokens != reference[position:position + len(generation.tokens)]:
            raise RuntimeError(f"a greedy step at position {position} left the target's greedy text")
        lengths.append(generation.steps[0].accepted)
        if progress is not None:
            progress()
    return lengths


def oracle_summary(lengths_by_source: Mapping[str, Sequence[Sequence[int]]]) -> dict:
    """Per source and for the best of them at each position (`best`): passes over all prompts and tokens per pass;
    `best_saves`: the best single source's passes over the mixture's (how many times fewer passes it needs).
    lengths_by_source[source][prompt] holds one prompt's step lengths."""
    sources = list(lengths_by_source)
    if not sources or "best" in sources:
        raise ValueError(f"the sources need names other than 'best' (the mixture's), got {sources}")
    prompts = len(lengths_by_source[sources[0]])
    tokens = sum(len(lengths) for lengths in lengths_by_source[sources[0]])
    passes = {s: sum(passes_needed(lengths) for lengths in lengths_by_source[s]) for s in sources}
    passes["best"] = sum(passes_needed(best_of({s: lengths_by_source[s][p] for s in sources})) for p in range(prompts))
    best_single = min(sources, key=passes.__getitem__)
    return {"tokens": tokens,
            "passes": passes,
            "tokens_per_pass": {name: round(tokens / n, 3) if n else 0.0 for name, n in passes.items()},
            "best_single": best_single,
            "best_saves": round(passes[best_single] / passes["best"], 3) if passes["best"] else 1.0}
