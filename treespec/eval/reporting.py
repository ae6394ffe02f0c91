"""Rows and summaries of decoding runs: what experiments write (metrics.jsonl, summary.json, bench and sweep
tables) and read back.

metrics.jsonl has one row per target pass (`"kind": "pass"`) and one per prompt (`"kind": "prompt"`);
summary.json aggregates a run. The functions are pure (generations in, plain dicts out) but for `write_table`,
which writes a table's files.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from treespec.decode.engine import Generation

PHASES = ("prefill", "draft", "target", "verify", "commit")


def pass_rows(generation: Generation, meta: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per target pass of `generation`; `meta` (prompt id, category, method...) is repeated in each."""
    return [
        {"kind": "pass", **meta, "step": i, "tree_size": s.tree_size, "tree_depth": s.tree_depth,
         "accepted": s.accepted, "accepted_ranks": list(s.accepted_ranks), "accepted_sources": list(s.accepted_sources),
         "offered_sources": [list(o) for o in s.offered_sources], "draft_s": s.draft_s,
         "target_s": s.target_s, "verify_s": s.verify_s, "commit_s": s.commit_s}
        for i, s in enumerate(generation.steps)
    ]


def count_sources(steps: Iterable[tuple[Sequence[Sequence[str]], Sequence[str]]]) -> dict[str, dict[int, list[int]]]:
    """{source: {depth d: [candidates offered at d, accepted at d]}} from (offered_sources, accepted_sources) pairs,
    one per target pass (`StepStats` fields, or the same columns of pass rows). A candidate is offered at depth d
    when its parent, at depth d - 1, was accepted."""
    counts: dict[str, dict[int, list[int]]] = {}
    for offered_by_depth, accepted in steps:
        for depth, offered in enumerate(offered_by_depth, start=1):
            for source in offered:
                counts.setdefault(source, {}).setdefault(depth, [0, 0])[0] += 1
            if depth <= len(accepted):
                counts.setdefault(accepted[depth - 1], {}).setdefault(depth, [0, 0])[1] += 1
    return counts


def source_counts(generations: Sequence[Generation]) -> dict[str, dict[int, list[int]]]:
    """`count_sources` over every step of `generations` ({} for single-source trees)."""
    return count_sources((s.offered_sources, s.accepted_sources) for g in generations for s in g.steps)


def acceptance_by_source(counts: Sequence[dict]) -> dict[str, list[dict[str, float]]]:
    """`source_counts` tables (from JSON too: depths may be strings) summed -> {source: [{"depth", "offered",
    "accepted", "rate" = accepted / offered}]}."""
    total: dict[str, dict[int, list[int]]] = {}
    for table in counts:
        for source, by_depth in table.items():
            for depth, (offered, accepted) in by_depth.items():
                cell = total.setdefault(source, {}).setdefault(int(depth), [0, 0])
                cell[0] += offered
                cell[1] += accepted
    return {source: [{"depth": d, "offered": o, "accepted": a, "rate": round(a / o, 4) if o else None}
                     for d, (o, a) in sorted(by_depth.items())] for source, by_depth in sorted(total.items())}


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
    generation (hf_assisted, when run), vs_llama_cpp over llama.cpp's plain decoding of the same GGUF (llama_cpp,
    when run), next to the planner's predicted_speedup
    (rows may carry it), which is relative to that same autoregressive loop. Where every row of a method timed its
    prompts' pass (prefill_seconds), prefill_seconds is their sum, decode_tokens_per_second the tokens over the
    seconds after it, and decode_vs_llama_cpp that over llama.cpp's (None otherwise)."""
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
        prefill = None if any(r.get("prefill_seconds") is None for r in members) else \
            sum(r["prefill_seconds"] for r in members)
        table.append({
            "sampling": sampling, "method": method, "prompts": len(members), "tokens": tokens,
            "seconds": round(seconds, 3), "tokens_per_second": tokens / seconds if seconds else float("nan"),
            "tokens_per_pass": tokens / passes if passes else float("nan"),
            "predicted_tokens_per_pass": predicted[0] if predicted else None,
            "median_speedup": statistics.median(ratios) if ratios else None,
            "greedy_parity": (sum(parity) / len(parity)) if parity else None,
            "prefill_seconds": None if prefill is None else round(prefill, 3),
            "decode_tokens_per_second": tokens / (seconds - prefill) if prefill is not None and seconds > prefill
            else None,
        })
    for row in table:
        base_rows = [r for r in table if r["sampling"] == row["sampling"] and r["method"] == baseline]
        row["speedup"] = row["tokens_per_second"] / base_rows[0]["tokens_per_second"] if base_rows else None
        ar_rows = [r for r in table if r["sampling"] == row["sampling"] and r["method"] == "autoregressive"]
        row["vs_autoregressive"] = row["tokens_per_second"] / ar_rows[0]["tokens_per_second"] if ar_rows else None
        assisted = [r for r in table if r["sampling"] == row["sampling"] and r["method"] == "hf_assisted"]
        row["vs_assisted"] = row["tokens_per_second"] / assisted[0]["tokens_per_second"] if assisted else None
        llama = [r for r in table if r["sampling"] == row["sampling"] and r["method"] == "llama_cpp"]
        row["vs_llama_cpp"] = row["tokens_per_second"] / llama[0]["tokens_per_second"] if llama else None
        row["decode_vs_llama_cpp"] = row["decode_tokens_per_second"] / llama[0]["decode_tokens_per_second"] \
            if llama and row["decode_tokens_per_second"] and llama[0]["decode_tokens_per_second"] else None
        predicted = [r["predicted_speedup"] for r in groups[row["sampling"], row["method"]] if r.get("predicted_speedup")]
        row["predicted_speedup"] = predicted[0] if predicted else None
    return table


def format_table(table: Sequence[dict[str, Any]]) -> str:
    """A fixed-width text table of `bench_table` rows."""
    header = ("sampling", "method", "tokens/s", "speedup", "median", "vs assisted", "vs llama.cpp", "prefill s",
              "decode vs llama.cpp", "tok/pass", "predicted", "vs AR", "pred. vs AR", "parity", "c", "draft MB")
    lines = [header]
    for r in table:
        def num(value, digits=2, suffix=""):
            return "-" if value is None else f"{value:.{digits}f}{suffix}"
        lines.append((r["sampling"], r["method"], num(r["tokens_per_second"]), num(r["speedup"], 2, "x"),
                      num(r["median_speedup"], 2, "x"), num(r.get("vs_assisted"), 2, "x"),
                      num(r.get("vs_llama_cpp"), 2, "x"), num(r.get("prefill_seconds")),
                      num(r.get("decode_vs_llama_cpp"), 2, "x"), num(r["tokens_per_pass"]),
                      num(r["predicted_tokens_per_pass"]),
                      num(r.get("vs_autoregressive"), 2, "x"), num(r.get("predicted_speedup"), 2, "x"),
                      "-" if r["greedy_parity"] is None else f"{100 * r['greedy_parity']:.0f}%",
                      num(r.get("draft_cost"), 3), num(r.get("draft_mb"), 1)))
    widths = [max(len(str(line[i])) for line in lines) for i in range(len(header))]
    return "\n".join("  ".join(str(cell).ljust(w) for cell, w in zip(line, widths)).rstrip() for line in lines)


def write_table(out_dir: str | Path, name: str, table: Sequence[dict[str, Any]], settings: dict[str, Any]) -> str:
    """Write <name>.csv (the table) and <name>.json ({"table", "settings"}) into `out_dir`; return the table as
    text (`format_table`)."""
    out_dir = Path(out_dir)
    with open(out_dir / f"{name}.csv", "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(dict.fromkeys(k for row in table for k in row)))
        writer.writeheader()
        writer.writerows(table)
    (out_dir / f"{name}.json").write_text(json.dumps({"table": list(table), "settings": settings}, indent=1,
                                                     default=str))
    return format_table(table)


def sweep_table(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per (batch_size, method) from per-group rows: totals, tokens/s, tokens per pass per row, measured
    speedups over batched autoregressive and hf_generate at the same B, and over autoregressive at B = 1."""
    groups: dict[tuple[int, str], list[dict[str, Any]]] = {}
    for row in rows:
        groups.setdefault((row["batch_size"], row["method"]), []).append(row)
    table = []
    for (size, method), members in sorted(groups.items()):
        tokens, seconds = sum(r["tokens"] for r in members), sum(r["seconds"] for r in members)
        passes = sum(r["passes"] for r in members)
        parity = [r["matches_reference"] for r in members if r.get("matches_reference") is not None]
        first = members[0]
        table.append({"batch_size": size, "method": method, "budget": first.get("budget"), "depth": first.get("depth"),
                      "groups": len(members), "tokens": tokens, "seconds": round(seconds, 4),
                      "tokens_per_second": tokens / seconds if seconds else float("nan"),
                      "tokens_per_pass": tokens / passes if passes else float("nan"),
                      "batched_passes": sum(r["batched_passes"] for r in members),
                      "predicted_tokens_per_pass": first.get("predicted_accepted"),
                      "predicted_speedup": first.get("predicted_speedup"),
                      "predicted_tokens_per_second": first.get("predicted_tokens_per_second"),
                      "greedy_parity": sum(parity) / len(parity) if parity else None})
    for row in table:
        same = {r["method"]: r for r in table if r["batch_size"] == row["batch_size"]}
        for name, key in (("autoregressive", "speedup"), ("hf_generate", "speedup_vs_hf")):
            row[key] = row["tokens_per_second"] / same[name]["tokens_per_second"] if name in same else None
        single = [r for r in table if r["batch_size"] == 1 and r["method"] == "autoregressive"]
        row["throughput_vs_b1"] = row["tokens_per_second"] / single[0]["tokens_per_second"] if single else None
    return table


def sweep_crossover(table: list[dict[str, Any]], plans: list[dict[str, Any]]) -> dict[str, Any]:
    """The first B where the plan chooses no tree, and the first B where no treespec tree measured faster than the
    batched autoregressive loop (None: trees paid at every B tried)."""
    measured = None
    for size in sorted({r["batch_size"] for r in table}):
        trees = [r for r in table if r["batch_size"] == size and r["method"] not in ("autoregressive", "hf_generate")
                 and (r["budget"] or 0) > 1]
        if trees and all((r["speedup"] or 0) <= 1 for r in trees):
            measured = size
            break
    predicted = next((r["batch_size"] for r in plans if not r["speculates"]), None)
    best = {}
    for size in sorted({r["batch_size"] for r in table}):
        rows = [r for r in table if r["batch_size"] == size and r["method"] != "hf_generate"]
        top = max(rows, key=lambda r: r["tokens_per_second"])
        best[size] = {"method": top["method"], "budget": top["budget"], "tokens_per_second": top["tokens_per_second"]}
    return {"predicted_no_tree_from": predicted, "measured_no_tree_from": measured, "fastest_per_batch": best}


def format_sweep(table: list[dict[str, Any]]) -> str:
    """A fixed-width text table of `sweep_table` rows."""
    header = ("B", "method", "n", "tokens/s", "tok/pass", "pred. tok/pass", "vs AR", "pred. vs AR", "vs HF", "parity")
    lines = [header]

    def num(value, digits=2, suffix=""):
        return "-" if value is None else f"{value:.{digits}f}{suffix}"

    for r in table:
        lines.append((str(r["batch_size"]), r["method"], "-" if r["budget"] is None else str(r["budget"]),
                      num(r["tokens_per_second"]), num(r["tokens_per_pass"]), num(r["predicted_tokens_per_pass"]),
                      num(r["speedup"], 2, "x"), num(r["predicted_speedup"], 2, "x"), num(r["speedup_vs_hf"], 2, "x"),
                      "-" if r["greedy_parity"] is None else f"{100 * r['greedy_parity']:.0f}%",
                      num(r.get("draft_cost"), 3), num(r.get("draft_mb"), 1)))
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(line, widths)).rstrip() for line in lines)
