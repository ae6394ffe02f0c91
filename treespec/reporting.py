"""Rows and summaries of decoding runs: what experiments write (metrics.jsonl, summary.json) and read back.

metrics.jsonl has one row per target pass (`"kind": "pass"`) and one per prompt (`"kind": "prompt"`);
summary.json aggregates a run. All functions are pure: generations in, plain dicts out.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from treespec.engine import Generation

PHASES = ("prefill", "draft", "target", "verify", "commit")


def pass_rows(generation: Generation, meta: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per target pass of `generation`; `meta` (prompt id, category, method...) is repeated in each."""
    return [
        {"kind": "pass", **meta, "step": i, "tree_size": s.tree_size, "tree_depth": s.tree_depth,
         "accepted": s.accepted, "accepted_ranks": list(s.accepted_ranks), "draft_s": s.draft_s,
         "target_s": s.target_s, "verify_s": s.verify_s, "commit_s": s.commit_s}
        for i, s in enumerate(generation.steps)
    ]


def prompt_row(generation: Generation, meta: dict[str, Any]) -> dict[str, Any]:
    phases = generation.phase_seconds()
    return {"kind": "prompt", **meta, "prompt_len": generation.prompt_len, "new_tokens": len(generation.tokens),
            "target_passes": generation.target_passes, "mean_accepted": generation.mean_accepted,
            "seconds": generation.seconds, "tokens_per_second": generation.tokens_per_second,
            "stop_reason": generation.stop_reason, **{f"{k}_s": v for k, v in phases.items()}}


def summarise(generations: Sequence[Generation], policy_info: dict[str, Any] | None = None) -> dict[str, Any]:
    """Totals over a run: tokens/s = all new tokens / all decoding seconds (prefill included)."""
    new_tokens = sum(len(g.tokens) for g in generations)
    passes = sum(g.target_passes for g in generations)
    seconds = sum(g.seconds for g in generations)
    phases = {name: sum(g.phase_seconds()[name] for g in generations) for name in PHASES}
    sizes = [s.tree_size for g in generations for s in g.steps]
    info = dict(policy_info or {})
    return {
        "prompts": len(generations),
        "new_tokens": new_tokens,
        "target_passes": passes,
        "seconds": seconds,
        "tokens_per_second": new_tokens / seconds if seconds else float("nan"),
        "mean_accepted": new_tokens / passes if passes else float("nan"),
        "predicted_accepted": info.get("predicted_accepted"),
        "mean_tree_size": sum(sizes) / len(sizes) if sizes else float("nan"),
        "phase_seconds": phases,
        "phase_ms_per_pass": {k: 1000 * v / passes for k, v in phases.items() if k != "prefill"} if passes else {},
        "policy": info,
    }


def bench_table(rows: Sequence[dict[str, Any]], baseline: str = "hf_generate") -> list[dict[str, Any]]:
    """Aggregate per-prompt benchmark rows (sampling, method, prompt_id, tokens, seconds, passes,
    predicted_accepted, matches_reference) into one row per (sampling, method).

    tokens/s = total tokens / total seconds; speedup = that over the baseline's in the same sampling mode;
    median_speedup = median over prompts of the per-prompt tokens/s ratio to the baseline; vs_autoregressive =
    tokens/s over treespec's own autoregressive method (when run), vs_assisted over transformers' assisted
    generation (hf_assisted, when run), next to the planner's predicted_speedup
    (rows may carry it), which is relative to that same autoregressive loop."""
    import statistics

    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for row in rows:
        groups.setdefault((row["sampling"], row["method"]), []).append(row)
    table = []
    for (sampling, method), members in groups.items():
        tokens, seconds = sum(r["tokens"] for r in members), sum(r["seconds"] for r in members)
        passes = sum(r["passes"] for r in members)
        base = {r["prompt_id"]: r for r in groups.get((sampling, baseline), [])}
        ratios = [(r["tokens"] / r["seconds"]) / (base[r["prompt_id"]]["tokens"] / base[r["prompt_id"]]["seconds"])
                  for r in members if r["prompt_id"] in base and r["seconds"] > 0 and base[r["prompt_id"]]["seconds"] > 0]
        parity = [r["matches_reference"] for r in members if r.get("matches_reference") is not None]
        predicted = [r["predicted_accepted"] for r in members if r.get("predicted_accepted") is not None]
        table.append({
            "sampling": sampling, "method": method, "prompts": len(members), "tokens": tokens,
            "seconds": round(seconds, 3), "tokens_per_second": tokens / seconds if seconds else float("nan"),
            "tokens_per_pass": tokens / passes if passes else float("nan"),
            "predicted_tokens_per_pass": predicted[0] if predicted else None,
            "median_speedup": statistics.median(ratios) if ratios else None,
            "greedy_parity": (sum(parity) / len(parity)) if parity else None,
        })
    for row in table:
        base_rows = [r for r in table if r["sampling"] == row["sampling"] and r["method"] == baseline]
        row["speedup"] = row["tokens_per_second"] / base_rows[0]["tokens_per_second"] if base_rows else None
        ar_rows = [r for r in table if r["sampling"] == row["sampling"] and r["method"] == "autoregressive"]
        row["vs_autoregressive"] = row["tokens_per_second"] / ar_rows[0]["tokens_per_second"] if ar_rows else None
        assisted = [r for r in table if r["sampling"] == row["sampling"] and r["method"] == "hf_assisted"]
        row["vs_assisted"] = row["tokens_per_second"] / assisted[0]["tokens_per_second"] if assisted else None
        predicted = [r["predicted_speedup"] for r in groups[row["sampling"], row["method"]] if r.get("predicted_speedup")]
        row["predicted_speedup"] = predicted[0] if predicted else None
    return table


def format_table(table: Sequence[dict[str, Any]]) -> str:
    """A fixed-width text table of `bench_table` rows."""
    header = ("sampling", "method", "tokens/s", "speedup", "median", "vs assisted", "tok/pass", "predicted", "vs AR",
              "pred. vs AR", "parity")
    lines = [header]
    for r in table:
        def num(value, digits=2, suffix=""):
            return "-" if value is None else f"{value:.{digits}f}{suffix}"
        lines.append((r["sampling"], r["method"], num(r["tokens_per_second"]), num(r["speedup"], 2, "x"),
                      num(r["median_speedup"], 2, "x"), num(r.get("vs_assisted"), 2, "x"), num(r["tokens_per_pass"]),
                      num(r["predicted_tokens_per_pass"]),
                      num(r.get("vs_autoregressive"), 2, "x"), num(r.get("predicted_speedup"), 2, "x"),
                      "-" if r["greedy_parity"] is None else f"{100 * r['greedy_parity']:.0f}%"))
    widths = [max(len(str(line[i])) for line in lines) for i in range(len(header))]
    return "\n".join("  ".join(str(cell).ljust(w) for cell, w in zip(line, widths)).rstrip() for line in lines)
