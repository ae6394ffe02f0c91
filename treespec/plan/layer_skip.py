"""Which layers a layer-skip self-draft skips (treespec.models.layer_skip): a measured search of acceptance x cost.

1. One full teacher-forced pass over calibration text (the target's own answers) gives the target's next token at
   every answer position and each layer's *influence*, 1 - cos(residual stream before the layer, after it),
   averaged over the tokens: a layer that barely turns the residual stream changes little when skipped.
2. For a ladder of skip counts k, the k least influential layers are skipped and the draft's top-1 agreement with
   the target, alpha_k, is measured teacher-forced over the same text (the greedy acceptance of a chain).
3. Each candidate's draft level (one node over a cached prefix, through the engine's drafter) is timed against a
   1-token target pass, c_k (`draft_costs`).
4. The chosen k maximises the predicted chain speedup max_{d >= 1} (1 + alpha + ... + alpha^d) / (t(d+1) + d c_k),
   with t(n) the target's relative pass time (1 without a profile). It can be below 1: on a small target whose LM
   head is a large share of a pass, no skip set pays (the search says so; the draft is still the best there is).

`cached_layer_skip` runs the search once per machine, torch version, thread count, target (its weights, dtype and
layout) and calibration, caches the choice with its measured draft costs c(w) beside the hardware profiles, and
reuses it.

SWIFT (Xia et al., 2024) searches skip sets by Bayesian optimisation over acceptance and cost; this search is a
cheaper deterministic ladder (1 + |ladder| teacher-forced passes and timings).
"""

from __future__ import annotations

import datetime
import hashlib
import json
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch
import yaml

from treespec.decode.cache import new_cache
from treespec.decode.mask import causal_mask
from treespec.errors import ConfigError
from treespec.models.layer_skip import LayerSkip
from treespec.models.layouts import linear_layout
from treespec.models.lean import lean_decoder
from treespec.models.precision import precision_name
from treespec.plan.costs import DRAFT_WIDTHS, interpolate_latency, measure_latency
from treespec.plan.hardware import device_identity, model_fingerprint, profiles_dir, write_cache

Progress = Callable[[str, int, int], None]


def _lean(target: torch.nn.Module):
    lean = lean_decoder(target)
    if lean is None:
        LayerSkip((), target.config.get_text_config().num_hidden_layers).check(target)  # raises with the reason
    return lean


def _forward(target, sequence: Sequence[int], layers: Sequence[int] | None, keep: Sequence[int] = ()):
    """One causal pass over `sequence` -> (logits [T, V], {i: hidden [T, H] after the first i layers})."""
    lean = _lean(target)
    device = next(target.parameters()).device
    ids = torch.tensor([list(sequence)], device=device)
    positions = torch.arange(ids.shape[1], device=device)[None]
    mask = causal_mask(torch.tensor([ids.shape[1]], device=device), ids.shape[1], next(target.parameters()).dtype)
    count = len(layers) if layers is not None else target.config.get_text_config().num_hidden_layers
    hidden, kept = lean(ids, positions, mask, new_cache(target, ids.shape[1], layers=count), keep=keep, layers=layers)
    return target.get_output_embeddings()(hidden)[0], {i: h[0] for i, h in kept.items()}


@torch.inference_mode()
def layer_influence(target: torch.nn.Module, sequences: Sequence[Sequence[int]],
                    answer_starts: Sequence[int]) -> tuple[list[float], list[torch.Tensor]]:
    """(influence [L] per layer: 1 - mean cosine between the residual stream before and after it over the answer
    positions; the target's argmax next tokens [T_i - s_i] at the answer positions of each sequence)."""
    layers = target.config.get_text_config().num_hidden_layers
    totals, count, greedy = torch.zeros(layers), 0, []
    for sequence, start in zip(sequences, answer_starts):
        logits, kept = _forward(target, sequence, None, keep=range(layers + 1))
        greedy.append(logits[start:].argmax(-1))
        for i in range(layers):
            before, after = kept[i][start:].float(), kept[i + 1][start:].float()
            totals[i] += torch.nn.functional.cosine_similarity(before, after, dim=-1).sum()
        count += len(sequence) - start
    return [1.0 - float(t) / count for t in totals], greedy


@torch.inference_mode()
def agreement(target: torch.nn.Module, draft: LayerSkip, sequences: Sequence[Sequence[int]],
              answer_starts: Sequence[int], greedy: Sequence[torch.Tensor]) -> float:
    """The draft's teacher-forced top-1 agreement with the target's argmax `greedy` over the answer positions."""
    same = total = 0
    for sequence, start, reference in zip(sequences, answer_starts, greedy):
        logits, _ = _forward(target, sequence, draft.layers)
        same += int((logits[start:].argmax(-1) == reference).sum())
        total += len(reference)
    return same / max(total, 1)


def predicted_speedup(alpha: float, cost: float, relative_latency: Mapping[int, float] | None = None,
                      max_depth: int = 8) -> tuple[float, int]:
    """(best predicted speedup of a chain of depth >= 1 over autoregressive decoding, its depth; below 1 when no
    chain pays) for per-token acceptance `alpha` and draft cost `cost` (one draft pass / one target pass); t(n)
    from `relative_latency` (1 when None)."""
    best = (0.0, 1)
    for depth in range(1, max_depth + 1):
        tokens = sum(alpha ** i for i in range(depth + 1))
        step = (interpolate_latency(relative_latency, depth + 1) if relative_latency else 1.0) + depth * cost
        best = max(best, (tokens / step, depth))
    return best


def skip_ladder(layers: int, steps: int = 8) -> list[int]:
    """Skip counts to try: about `steps` values from small to 80% of the layers."""
    top = max(1, int(0.8 * layers))
    return sorted({max(1, round(top * (i + 1) / steps)) for i in range(steps)})


def search_layer_skip(target: torch.nn.Module, sequences: Sequence[Sequence[int]], answer_starts: Sequence[int], *,
                      counts: Sequence[int] | None = None, relative_latency: Mapping[int, float] | None = None,
                      prefix_len: int = 256, progress: Progress | None = None) -> LayerSkip:
    """The `LayerSkip` of `target` with the best predicted chain speedup (see the module docstring), its search
    (influence per layer, agreement, cost and prediction per candidate, seconds) recorded in `.search`.
    sequences: calibration token ids, the target's own answers from answer_starts[i] on."""
    if not sequences or len(sequences) != len(answer_starts):
        raise ConfigError("the layer-skip search needs calibration sequences, each with its answer start")
    if any(not 0 < s < len(q) for q, s in zip(sequences, answer_starts)):
        raise ConfigError("every calibration sequence needs a prompt and at least one answer token")
    started = time.perf_counter()
    layers = target.config.get_text_config().num_hidden_layers
    counts = [k for k in (counts or skip_ladder(layers)) if 0 < k < layers]
    total = 1 + 2 * len(counts)
    tick = (lambda what, done: progress(what, done, total)) if progress else (lambda what, done: None)
    influence, greedy = layer_influence(target, sequences, answer_starts)
    order = sorted(range(layers), key=lambda i: influence[i])  # least influential first
    tick("layer influence", 1)
    candidates = []
    for k in counts:
        draft = LayerSkip(tuple(order[:k]), layers)
        alpha = agreement(target, draft, sequences, answer_starts, greedy)
        tick(f"skip {k}: agreement", 1 + 2 * len(candidates) + 1)
        cost = draft_costs(target, draft, widths=(1,), prefix_len=prefix_len)[1]
        speedup, depth = predicted_speedup(alpha, cost, relative_latency)
        candidates.append({"skip_count": k, "skip": list(draft.skip), "agreement": round(alpha, 4),
                           "cost": round(cost, 4), "predicted_speedup": round(speedup, 4), "chain_depth": depth})
        tick(f"skip {k}: cost", 1 + 2 * len(candidates))
    best = max(candidates, key=lambda c: c["predicted_speedup"])
    search = {"influence": [round(v, 5) for v in influence], "candidates": candidates, "chosen": best["skip_count"],
              "calibration_tokens": sum(len(q) - s for q, s in zip(sequences, answer_starts)),
              "seconds": round(time.perf_counter() - started, 1)}
    return LayerSkip(tuple(best["skip"]), layers, search)


LAYER_SKIP_VERSION = 2  # bump when what the search measures changes
Calibration = Callable[[], tuple[list[list[int]], list[int]]]  # () -> (sequences, answer starts)


def draft_costs(target: torch.nn.Module, draft: LayerSkip, *, widths: Sequence[int] = DRAFT_WIDTHS,
                prefix_len: int = 256, repeats: int = 5) -> dict[int, float]:
    """c(w) for w in `widths`: one draft level of w nodes (the engine's drafter, masks included) / one 1-token
    target pass, measured together (treespec.plan.costs.measure_latency)."""
    measured = measure_latency(target, draft, sizes=(1,), draft_widths=widths, prefix_len=prefix_len,
                               repeats=repeats, warmup=1)
    base = measured.target_ms[1][1]
    return {int(w): ms / base for w, ms in sorted(measured.draft_ms[1].items())}


def cached_layer_skip(target: torch.nn.Module, calibrate: Calibration, *, calibration: dict[str, Any],
                      relative_latency: Mapping[int, float] | None = None, remeasure: bool = False,
                      progress: Progress | None = None) -> tuple[LayerSkip, dict[int, float], str]:
    """(the searched `LayerSkip`, its draft costs c(w), where it came from): from the cache when this machine, torch,
    thread count, target and `calibration` (a description of what `calibrate()` returns) match, else measured now
    (`search_layer_skip` on `calibrate()`'s sequences, then `draft_costs`) and cached."""
    device = next(target.parameters()).device
    key = {"version": LAYER_SKIP_VERSION, "kind": "layerskip", "device": device_identity(device),
           "torch": str(torch.__version__), "threads": torch.get_num_threads(), "target": model_fingerprint(target),
           "dtype": precision_name(target), "layout": linear_layout(target), "calibration": calibration}
    path = profiles_dir() / f"layerskip-{hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:24]}.yaml"
    if not remeasure:
        try:
            entry = yaml.safe_load(path.read_text())
            if isinstance(entry, dict) and entry.get("key") == key:
                draft = LayerSkip.from_dict(entry["draft"])
                draft.check(target)
                return draft, {int(w): float(c) for w, c in entry["draft_costs"].items()}, \
                    f"cached from {entry['measured_at']} ({path})"
        except (OSError, yaml.YAMLError, KeyError, TypeError, ValueError, ConfigError):
            pass
    started = time.perf_counter()
    sequences, starts = calibrate()
    draft = search_layer_skip(target, sequences, starts, relative_latency=relative_latency, progress=progress)
    costs = {w: round(c, 5) for w, c in draft_costs(target, draft).items()}  # as the cache keeps them
    write_cache(path, {"key": key, "measured_at": datetime.datetime.now().isoformat(timespec="seconds"),
                       "draft": draft.to_dict(), "draft_costs": costs})
    return draft, costs, f"measured now ({time.perf_counter() - started:.1f} s; cached in {path})"
