"""The losslessness certificate (conf/certify.yaml; `make certify`): the full grid of treespec.eval.certify_grid,
with the power of every case stated.

    make certify                                        # the full grid, 2 worker processes
    python experiments/certify.py scale=0.1 require_power=false     # a reduced run (a tenth of the draws)
    python experiments/certify.py select=eagle jobs=1   # the cases whose name contains "eagle"

Each case passes when its family (joint + per-position conditional tests, Holm) is not rejected at `alpha` and no
impossible sequence appeared; with require_power, the detectable bias (first position, a token of probability
0.2, power 0.9) must also be <= 2% (verification) / 10% (end to end), and the events must have happened. Writes
certify.txt, certify.csv and certify.json; prints the table; exits 1 when a case fails.
"""

from __future__ import annotations

import csv
import json
import sys
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field

from omegaconf import DictConfig, OmegaConf

from treespec.app import cli
from treespec.eval.certify_grid import end_to_end_cases, format_rows, run_grid_case, verification_cases


@dataclass
class CertifySchema:
    draws: int = 360_000  # verification level, per case (<= 2% detectable bias needs ~350k)
    greedy_tables: int = 2000  # greedy verification: one random table per seed
    runs: int = 14_500  # end to end, per case (<= 10% needs ~14k)
    alpha: float = 1e-3  # per case (the family of joint + per-position tests)
    scale: float = 1.0  # multiplies draws, greedy_tables and runs (a reduced run: 0.1)
    require_power: bool = True  # fail a case whose detectable bias misses its target
    select: str = ""  # run only the cases whose name contains this
    jobs: int = 2  # worker processes (cases are seeded, so results do not depend on it)
    seed: int = 0
    targets: dict[str, float] = field(default_factory=lambda: {"verification": 0.02, "end to end": 0.10})


def run(cfg: DictConfig) -> list[dict]:
    settings = OmegaConf.to_container(cfg, resolve=True)
    cases = [c for c in verification_cases() + end_to_end_cases() if cfg.select in c["name"]]
    if not cases:
        cli.fail(f"no case name contains '{cfg.select}'")
    print(f"{len(cases)} cases, scale {cfg.scale}, {cfg.jobs} worker(s)", flush=True)
    rows = []

    def done(row: dict) -> None:
        rows.append(row)
        print(f"  {row['case']}: {'pass' if row['passed'] else 'FAIL'} ({row['seconds']} s)", flush=True)

    if cfg.jobs > 1:
        with ProcessPoolExecutor(max_workers=cfg.jobs) as pool:
            for future in [pool.submit(run_grid_case, case, settings, i) for i, case in enumerate(cases)]:
                done(future.result())
    else:
        for i, case in enumerate(cases):
            done(run_grid_case(case, settings, i))
    table = format_rows(rows)
    note = ("detectable bias: the smallest relative over-weighting of a first token of probability 0.2 that the case "
            f"detects with probability 0.9 at level {cfg.alpha} (Holm over the joint and per-position tests)")
    print(table + "\n" + note)
    out_dir = cli.output_dir()
    (out_dir / "certify.txt").write_text(table + "\n" + note + "\n")
    with open(out_dir / "certify.csv", "w", newline="") as handle:
        fields = ["case", "level", "runs", "statistic", "df", "p_value", "impossible", "detectable_bias", "target_bias",
                  "passed", "power_ok", "seconds"]
        writer = csv.DictWriter(handle, fieldnames=fields, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)
    (out_dir / "certify.json").write_text(json.dumps({"settings": settings, "rows": rows}, indent=1))
    print(f"-> {out_dir}")
    failed = [r["case"] for r in rows if not r["passed"] or (cfg.require_power and not r["power_ok"])]
    if failed:
        print(f"{len(failed)} case(s) failed: {', '.join(failed)}", file=sys.stderr)
        sys.exit(1)
    return rows


if __name__ == "__main__":
    cli.run_app(run, "certify", {"certify_schema": CertifySchema})
