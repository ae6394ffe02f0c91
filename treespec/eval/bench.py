"""Benchmark runs: several decoding methods on the same prompt groups, in a rotating order, one row per run.

A group is B prompts decoded together (B = 1: one prompt). For each group and sampling mode every method runs once,
the order shifted by one per group so that no method always runs first; greedy outputs are compared with a
reference method's (transformers' `generate`, or treespec's autoregressive loop). Methods are functions
(group, sampling, seed, max_new_tokens) -> `Run`; `treespec_method` and `hf_method` make the two kinds. Target
passes are counted by a forward pre-hook on the target around transformers' runs (`PassCounter`) and from the
engine's own step counts for treespec's.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from treespec.api import generate_batch
from treespec.decode.sampling import SamplingConfig
from treespec.drafters.policies import policy_sources
from treespec.eval.reporting import source_counts
from treespec.plan.bandwidth import tensor_bytes
from treespec.plan.costs import measure_latency


@dataclass(frozen=True)
class Run:
    outputs: list[list[int]]  # each row's new tokens (up to and including its EOS)
    passes: int  # target passes summed over the rows (a batched pass counts once per row it served)
    batched_passes: int  # the target's forward calls
    source_counts: dict | None = None  # trees from several sources: treespec.eval.reporting.source_counts
    prefill_seconds: float | None = None  # the time the prompts' own pass took (None: not measured)


Method = Callable[[list[list[int]], SamplingConfig, int, int], Run]


class PassCounter:
    """Counts forward calls of a model (one per target pass) through forward hooks, only inside `counting()`, and
    times the first of them (`first_seconds`: the prompt's pass, as `generate` runs it): a hook left on the target
    would keep treespec's engine off its lean decoder (which runs no hooks) for every other method
    (treespec.models.lean.lean_unsupported)."""

    def __init__(self, model: torch.nn.Module):
        self.model, self.calls, self.first_seconds = model, 0, None
        self._started = 0.0

    @contextlib.contextmanager
    def counting(self):
        """Count the calls made inside the block (from zero) and time the first."""
        self.calls, self.first_seconds = 0, None
        handles = [self.model.register_forward_pre_hook(self._before), self.model.register_forward_hook(self._after)]
        try:
            yield self
        finally:
            for handle in handles:
                handle.remove()

    def _before(self, *_):
        self.calls += 1
        if self.calls == 1:
            self._started = time.perf_counter()

    def _after(self, *_):
        if self.calls == 1 and self.first_seconds is None:
            self.first_seconds = time.perf_counter() - self._started


def hf_generate(target, assistant, batch: list[list[int]], sampling: SamplingConfig, max_new_tokens: int,
                eos: int | None, pad: int, seed: int) -> list[list[int]]:
    """transformers' `generate` (with `assistant`: assisted generation, one prompt only) on prompts of any lengths
    as one left-padded batch, with treespec's sampling settings; each row's tokens up to and including its EOS."""
    torch.manual_seed(seed)
    options: dict[str, Any] = {"do_sample": False}
    if not sampling.greedy:  # top_k=0 disables transformers' default of 50
        options = {"do_sample": True, "temperature": sampling.temperature, "top_p": sampling.top_p,
                   "top_k": sampling.top_k}
    width = max(len(ids) for ids in batch)
    input_ids = torch.full((len(batch), width), pad, dtype=torch.long)
    mask = torch.zeros(len(batch), width, dtype=torch.long)
    for b, ids in enumerate(batch):
        input_ids[b, width - len(ids):], mask[b, width - len(ids):] = torch.as_tensor(ids), 1
    out = target.generate(input_ids=input_ids.to(target.device), attention_mask=mask.to(target.device),
                          max_new_tokens=max_new_tokens, eos_token_id=eos, pad_token_id=pad, assistant_model=assistant,
                          **options)
    rows = []
    for b in range(len(batch)):
        tokens = out[b, width:].tolist()
        rows.append(tokens[: tokens.index(eos) + 1] if eos is not None and eos in tokens else tokens)
    return rows


def hf_method(target, counter: PassCounter, eos: int | None, pad: int, assistant=None) -> Method:
    """transformers' generate (assisted with `assistant`) as a bench method."""

    def run(group, sampling, seed, max_new_tokens) -> Run:
        with counter.counting():
            outputs = hf_generate(target, assistant, group, sampling, max_new_tokens, eos, pad, seed)
        return Run(outputs, counter.calls * len(group), counter.calls, prefill_seconds=counter.first_seconds)

    return run


def treespec_method(target, draft, policy, eos: int | None, draft_vocab=None) -> Method:
    """treespec's engine with a tree policy as a bench method (row b of a group draws from seed + b); its forward
    calls are the prefill and the batch's steps (the longest row's passes)."""

    def run(group, sampling, seed, max_new_tokens) -> Run:
        outs = generate_batch(target, draft, group, tree=policy, max_new_tokens=max_new_tokens,
                              temperature=sampling.temperature, top_p=sampling.top_p, top_k=sampling.top_k, seed=seed,
                              eos_token_id=eos, draft_vocab=draft_vocab)
        return Run([o.tokens for o in outs], sum(o.target_passes for o in outs),
                   1 + max(o.target_passes for o in outs), source_counts(outs) or None, outs[0].prefill_s)

    return run


def draft_footprint(target, draft, policy) -> dict[str, float]:
    """What a method's drafting costs: {"draft_cost": c, one draft level of one node / one 1-token target pass
    (treespec.plan.costs.measure_latency, measured now: a ratio from one run), "draft_mb": the weights the draft adds
    to the target's, in MB (an EAGLE or Medusa head reads the target's embedding and LM head; a layer-skip draft is
    the target itself)}; zeros for a policy that drafts no model (autoregressive, prompt lookup)."""
    if draft is None or "model" not in policy_sources(policy):
        return {"draft_cost": 0.0, "draft_mb": 0.0}
    measured = measure_latency(target, draft, sizes=(1,), draft_widths=(1,), prefix_len=256, repeats=5, warmup=1)
    own = tensor_bytes([*draft.parameters(), *draft.buffers()], excluding=[*target.parameters(), *target.buffers()]) \
        if isinstance(draft, torch.nn.Module) else 0
    return {"draft_cost": round(measured.draft_ms[1][1] / measured.target_ms[1][1], 4), "draft_mb": round(own / 1e6, 1)}


def llama_cpp_method(llm, eos: int | None) -> Method:
    """llama.cpp (treespec.eval.llama_cpp.LlamaCpp) as a bench method: one prompt after another (row b draws from
    seed + b); passes are its forward calls, its prefill the prompts' first calls."""

    def run(group, sampling, seed, max_new_tokens) -> Run:
        outputs, passes, prefill = [], 0, 0.0
        for b, ids in enumerate(group):
            tokens, calls = llm.generate(ids, sampling, max_new_tokens, eos, seed + b)
            outputs.append(tokens)
            passes += calls
            prefill += llm.first_seconds
        return Run(outputs, passes, passes, prefill_seconds=prefill)

    return run


def run_bench(methods: dict[tuple[str, str], Method], groups: Sequence[Sequence[tuple[Any, list[int]]]],
              samplings: dict[str, SamplingConfig], *, seed: int, max_new_tokens: int, reference: str,
              info: Callable[[str, str], dict] = lambda sampling, method: {},
              on_row: Callable[[dict], None] | None = None, warmup_tokens: int = 8) -> list[dict[str, Any]]:
    """Rows of every (group, sampling, method) run, methods keyed by (sampling name, method name); groups hold
    (prompt, token ids) pairs with `prompt.id` and `prompt.category`. Group g starting at prompt i decodes with seed
    seed + i. Every method first decodes the first group once with `warmup_tokens` (first calls pay one-off
    costs). `info(sampling, method)` adds fields (the policy's predictions) to each row; `on_row` sees each row as
    it is complete. A row's `output` is the token list (one prompt) or the rows' lists (a batch)."""
    names = list(dict.fromkeys(method for _, method in methods))
    for (sampling, _), decode in methods.items():
        decode([ids for _, ids in groups[0]], samplings[sampling], seed, warmup_tokens)
    rows, start_index = [], 0
    for index, group in enumerate(groups):
        ids = [i for _, i in group]
        for sampling_name, sampling in samplings.items():
            shift = index % len(names)
            done, reference_output = [], None
            for method in names[shift:] + names[:shift]:
                if (sampling_name, method) not in methods:
                    continue
                start = time.perf_counter()
                run = methods[sampling_name, method](ids, sampling, seed + start_index, max_new_tokens)
                seconds = time.perf_counter() - start
                output = run.outputs[0] if len(group) == 1 else run.outputs
                if sampling.greedy and method == reference:
                    reference_output = output
                prompt = group[0][0]
                done.append({"prompt_id": prompt.id if len(group) == 1 else "+".join(str(p.id) for p, _ in group),
                             "category": prompt.category if len(group) == 1 else "batch", "sampling": sampling_name,
                             "method": method, "batch_size": len(group), "tokens": sum(len(o) for o in run.outputs),
                             "seconds": seconds, "prefill_seconds": run.prefill_seconds, "passes": run.passes,
                             "batched_passes": run.batched_passes,
                             **info(sampling_name, method), "output": output,
                             **({"source_counts": run.source_counts} if run.source_counts else {})})
            for row in done:  # greedy: every method must reproduce the reference's output
                row["matches_reference"] = None if reference_output is None else row["output"] == reference_output
                if on_row is not None:
                    on_row(row)
            rows += done
        start_index += len(group)
    return rows
