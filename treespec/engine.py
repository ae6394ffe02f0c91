"""The decoding loop: draft -> flatten -> one target pass -> verify -> commit, with per-phase timings.

State between steps: the target's KV cache holds every accepted token except the last one, the *root*,
which the next pass scores together with the drafted tree. One step:

    tree   = policy.draft(drafter, root, ...)          # DraftTree: tokens [N], shape, q
    flat   = mask.flatten(tree, prefix_len)             # tokens, position ids, additive 4-D mask
    logits = target(flat, cache)                        # [N, V]: p after every node
    result = verify.verify(tree, p, mode, generator)    # accepted path (root first) + bonus token
    commit(cache, accepted path); drafter.observe(...)  # keep the accepted slots only

`generate` accepts any transformers causal LM pair sharing a tokenizer; `autoregressive` runs the same
loop with a one-node tree (one token per pass), the fair baseline. Batch size 1.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch
from transformers import PreTrainedModel

from treespec.cache import cache_length, commit, new_cache
from treespec.draft import Drafter, ModelDrafter, StepOutcome
from treespec.eagle import EagleDrafter, EagleDraftModel, fused_features, target_features
from treespec.errors import ConfigError
from treespec.lean_decoder import LeanDecoder, lean_decoder
from treespec.mask import flatten
from treespec.models import check_pair
from treespec.policies import TreePolicy, as_policy
from treespec.sampling import SamplingConfig, probabilities
from treespec.verify import verify


@dataclass(frozen=True)
class StepStats:
    tree_size: int  # tokens verified by this target pass, incl. the root
    tree_depth: int  # levels of the drafted tree, incl. the root
    accepted: int  # tokens this pass added to the output (accepted drafts + bonus, after EOS/limit cuts)
    accepted_ranks: tuple[int, ...]  # 0-based sibling rank of each accepted draft node, by depth
    draft_s: float
    target_s: float
    verify_s: float
    commit_s: float


@dataclass(frozen=True)
class Generation:
    tokens: list[int]  # new tokens only
    steps: list[StepStats]
    prompt_len: int
    stop_reason: str  # "eos" or "max_new_tokens"
    prefill_s: float
    seconds: float  # wall time of the whole call, prefill included
    policy: dict = field(default_factory=dict)

    @property
    def target_passes(self) -> int:
        return len(self.steps)

    @property
    def mean_accepted(self) -> float:
        """Tokens produced per target pass (accepted drafts + bonus)."""
        return len(self.tokens) / max(1, len(self.steps))

    @property
    def tokens_per_second(self) -> float:
        return len(self.tokens) / self.seconds if self.seconds > 0 else float("nan")

    def phase_seconds(self) -> dict[str, float]:
        totals = {"prefill": self.prefill_s}
        for name in ("draft", "target", "verify", "commit"):
            totals[name] = sum(getattr(s, f"{name}_s") for s in self.steps)
        return totals


class _Clock:
    """perf_counter that first waits for queued CUDA work (and only then: CPU runs are never synced)."""

    def __init__(self, device: torch.device):
        self.cuda = device.type == "cuda"

    def __call__(self) -> float:
        if self.cuda:
            torch.cuda.synchronize()
        return time.perf_counter()


class _LazyProbs:
    """Target probabilities computed row by row, only for nodes the verification walk visits."""

    def __init__(self, logits: torch.Tensor, sampling: SamplingConfig):
        self.logits, self.sampling, self.rows = logits, sampling, {}

    def __getitem__(self, node: int) -> torch.Tensor:
        if node not in self.rows:
            self.rows[node] = probabilities(self.logits[node], self.sampling)
        return self.rows[node]


def _prompt_list(input_ids) -> list[int]:
    if isinstance(input_ids, torch.Tensor):
        if input_ids.dim() == 2 and input_ids.shape[0] == 1:
            input_ids = input_ids[0]
        if input_ids.dim() != 1:
            raise ConfigError(f"input_ids must be 1-D (one prompt), got shape {tuple(input_ids.shape)}")
        input_ids = input_ids.tolist()
    ids = [int(t) for t in input_ids]
    if not ids:
        raise ConfigError("the prompt is empty: input_ids needs at least one token")
    return ids


def _context_limit(model: PreTrainedModel) -> int | None:
    config = model.config.get_text_config()
    for name in ("max_position_embeddings", "n_positions", "max_sequence_length", "seq_length"):
        value = getattr(config, name, None)
        if isinstance(value, int) and value > 0:
            return value
    return None


def _eos_ids(model: PreTrainedModel, eos_token_id) -> frozenset[int]:
    if eos_token_id is None:
        eos_token_id = getattr(model.generation_config, "eos_token_id", None)
    if eos_token_id is None:
        return frozenset()
    if isinstance(eos_token_id, int):
        return frozenset({eos_token_id})
    return frozenset(int(t) for t in eos_token_id)


def _validate(target: PreTrainedModel, draft: PreTrainedModel | None, policy: TreePolicy, prompt: list[int],
              max_new_tokens: int) -> bool:
    """Check a request before any model work; return whether the policy needs the draft."""
    if int(max_new_tokens) != max_new_tokens or max_new_tokens < 1:
        raise ConfigError(f"max_new_tokens must be an integer >= 1, got {max_new_tokens}")
    limit = _context_limit(target)
    if limit is not None and len(prompt) + max_new_tokens > limit:
        raise ConfigError(
            f"prompt ({len(prompt)} tokens) + max_new_tokens ({max_new_tokens}) exceeds the target's context of {limit}"
        )
    vocab = target.config.get_text_config().vocab_size
    if max(prompt) >= vocab or min(prompt) < 0:
        raise ConfigError(f"prompt token ids must lie in [0, {vocab})")
    needs_draft = not (getattr(policy, "shape", None) is not None and policy.shape.size == 1)
    if needs_draft:
        if draft is None:
            raise ConfigError(f"the tree policy '{policy.describe()['policy']}' needs a draft model")
        check_pair(target, draft)
    return needs_draft


def make_drafter(draft: PreTrainedModel, target: PreTrainedModel, max_length: int,
                 vocab: torch.Tensor | None = None) -> Drafter:
    """The drafter for a draft model: an EAGLE head reads the target's features, anything else is a causal LM
    (proposing only from the token ids `vocab` [S] when given; see `treespec.draft.vocab_subset`)."""
    if isinstance(draft, EagleDraftModel):
        if vocab is not None:
            raise ConfigError("a draft vocabulary subset is implemented for causal-LM drafts, not the EAGLE head")
        return EagleDrafter(draft, target, max_length)
    return ModelDrafter(draft, max_length, vocab)


def target_pass(target: PreTrainedModel, lean: LeanDecoder | None, want_hidden: bool, layers: tuple[int, ...] = (),
                 **inputs) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Logits [N, V] (and, if asked, the drafter's target features [N, F]: the last hidden states, or those
    of `layers` fused by treespec.eagle.target_features) of one target forward over the cache, through
    `lean` (treespec.lean_decoder) where given: the same arithmetic as transformers' modules."""
    if lean is not None:
        hidden, states = lean(inputs["input_ids"][0], inputs["position_ids"][0], inputs["attention_mask"],
                              inputs["cache"], keep=layers)  # [N, H]
        logits = target.get_output_embeddings()(hidden)
        if not want_hidden:
            return logits, None
        return logits, fused_features(target, hidden, states, layers) if layers else hidden
    if not want_hidden:
        return target(**inputs, use_cache=True).logits[0], None
    out = target.base_model(**inputs, use_cache=True, output_hidden_states=bool(layers))
    return target.get_output_embeddings()(out.last_hidden_state[0]), target_features(target, out, layers)[0]


@torch.inference_mode()
def generate(
    target: PreTrainedModel,
    draft: PreTrainedModel | None,
    input_ids: Sequence[int] | torch.Tensor,
    *,
    tree=None,
    max_new_tokens: int,
    temperature: float = 0.0,
    top_p: float = 1.0,
    top_k: int = 0,
    seed: int | None = None,
    eos_token_id: int | Sequence[int] | None = None,
    streamer: Callable[[list[int]], None] | None = None,
    draft_vocab: torch.Tensor | None = None,
) -> Generation:
    """Speculative decoding with a token tree; the output is distributed exactly as the target's own.

    tree: a `TreeShape` (e.g. `treespec.optimizer.sequoia_tree(...)`), a policy from `treespec.policies`
        (Chain, KAry, Paths, Sequoia, Static, Dynamic, Adaptive), or None for plain autoregressive decoding.
    temperature 0 = greedy; top_p and top_k are applied to target and draft alike.
    eos_token_id: None uses the target's generation config; generation stops after the first EOS.
    streamer: called with the new tokens of every step, as soon as they are accepted.
    draft_vocab: token ids [S] the draft proposes from (its q renormalised over them; still lossless).
    """
    sampling = SamplingConfig(temperature, top_p, top_k)
    policy: TreePolicy = as_policy(tree)
    prompt = _prompt_list(input_ids)
    needs_draft = _validate(target, draft, policy, prompt, max_new_tokens)

    device = next(target.parameters()).device
    dtype = next(target.parameters()).dtype
    clock = _Clock(device)
    generator = torch.Generator(device=device)
    if seed is None:
        generator.seed()
    else:
        generator.manual_seed(int(seed))
    eos = _eos_ids(target, eos_token_id)
    max_length = len(prompt) + max_new_tokens + 1

    start = clock()
    cache = new_cache(target, max_length)
    drafter = make_drafter(draft, target, max_length, draft_vocab) if needs_draft else None
    want_hidden = bool(getattr(drafter, "wants_target_hidden", False))
    layers = tuple(getattr(drafter, "target_layers", ()))  # a fused EAGLE head's target layers
    lean = lean_decoder(target)  # tree passes in fewer steps (not the prefill: transformers' causal pass, as generate)
    prefix_hidden = None
    if len(prompt) > 1:  # the prompt minus its last token: no logits needed
        prefill = target.base_model(input_ids=torch.tensor([prompt[:-1]], device=device), cache=cache, use_cache=True,
                                    output_hidden_states=bool(layers))
        prefix_hidden = target_features(target, prefill, layers)[0] if want_hidden else None
    if drafter is not None:
        drafter.reset(prompt, prefix_hidden)
    prefill_s = clock() - start

    root, out, steps, stop_reason = prompt[-1], [], [], "max_new_tokens"
    while len(out) < max_new_tokens:
        t0 = clock()
        remaining = max_new_tokens - len(out)
        drafted = policy.draft(drafter, root, sampling, generator, eos, max_levels=remaining)
        t1 = clock()
        shape = drafted.shape
        prefix_len = cache_length(cache)
        flat = flatten(drafted.tokens.to(device), shape.parents, shape.depths, prefix_len, dtype)
        logits, hidden = target_pass(target, lean, want_hidden, layers, input_ids=flat.input_ids, position_ids=flat.position_ids,
                                      attention_mask=flat.attention_mask, cache=cache)  # [N, V], [N, F] or None
        t2 = clock()
        tokens = drafted.tokens.tolist()
        target_probs = logits if sampling.greedy else _LazyProbs(logits, sampling)
        result = verify(tokens, shape.children, target_probs, drafted.draft_probs, drafted.verify_mode, generator)
        t3 = clock()
        new = [tokens[n] for n in result.accepted[1:]] + [result.bonus]
        cut = next((i + 1 for i, t in enumerate(new) if t in eos), len(new))
        new = new[: min(cut, remaining)]
        out.extend(new)
        finished = len(out) >= max_new_tokens or new[-1] in eos
        if not finished:
            commit(cache, prefix_len, result.accepted)
            if drafter is not None:
                ids = drafted.drafter_ids
                nodes = tuple(ids[n] for n in result.accepted) if ids is not None else result.accepted
                path_hidden = hidden[list(result.accepted)] if hidden is not None else None
                drafter.observe(StepOutcome(nodes, tuple(tokens[n] for n in result.accepted), result.bonus, path_hidden))
            root = result.bonus
        t4 = clock()
        ranks = tuple(shape.ranks[n] for n in result.accepted[1:])[: len(new)]  # drafts that reached the output
        steps.append(StepStats(shape.size, shape.levels, len(new), ranks, t1 - t0, t2 - t1, t3 - t2, t4 - t3))
        if streamer is not None:
            streamer(new)
        if new[-1] in eos:
            stop_reason = "eos"
            break
    return Generation(out, steps, len(prompt), stop_reason, prefill_s, clock() - start, policy.describe())


def autoregressive(
    target: PreTrainedModel,
    input_ids: Sequence[int] | torch.Tensor,
    *,
    max_new_tokens: int,
    temperature: float = 0.0,
    top_p: float = 1.0,
    top_k: int = 0,
    seed: int | None = None,
    eos_token_id: int | Sequence[int] | None = None,
    streamer: Callable[[list[int]], None] | None = None,
) -> Generation:
    """One token per target pass through the same loop as `generate` (a one-node tree, no draft)."""
    return generate(target, None, input_ids, tree=None, max_new_tokens=max_new_tokens, temperature=temperature,
                    top_p=top_p, top_k=top_k, seed=seed, eos_token_id=eos_token_id, streamer=streamer)
