"""Where treespec stands: every method on the same prompts, in one process, interleaved (conf/bench.yaml).

    make bench                                              # default pair, 10 MT-Bench prompts, ~15 minutes
    python experiments/bench.py data.limit=80               # all 80 MT-Bench first turns
    python experiments/bench.py data=humaneval data.limit=null methods=[hf_generate,sequoia]
    python experiments/bench.py batch_size=4 methods=[hf_generate,autoregressive,sequoia]

Methods: transformers `generate` with the target alone (hf_generate), transformers assisted generation
(hf_assisted, its default settings) with the pair's causal-LM draft (`model.assistant`, default the draft),
llama.cpp on the GGUF the target is made from, plain (llama_cpp) and with its prompt-lookup drafting
(llama_cpp_lookup; both need `make baselines`, and are left out with one line without it), and treespec's engine
with each tree in `trees` (autoregressive, chain, k-ary, Sequoia: the hardware-aware tree, dynamic, adaptive).
`method_drafts` gives a method another draft than the pair's. For each prompt group and
sampling mode every method runs once, in a rotating order (treespec.eval.bench); greedy outputs are checked
against hf_generate's (or treespec's autoregressive loop's). batch_size=B > 1: prompts are taken B at a time and
every method decodes a group as one batch (trees planned with B's costs; hf_generate left-padded; hf_assisted,
one prompt at a time only, is left out); a row is then one group.
Writes bench.csv (the table), bench_rows.jsonl (one row per group x sampling x method) and bench.json (with, for
trees from several sources such as `hybrid`, the acceptance by source and depth).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import torch
from omegaconf import DictConfig, OmegaConf
from tqdm import tqdm

from treespec.app import cli
from treespec.app.configs import (
    DataSpec,
    HardwareSpec,
    ModelSpec,
    PairSpec,
    SamplingSpec,
    TreeSpec,
    check_hardware,
    load_data,
    sampling_config,
)
from treespec.app.session import open_session
from treespec.drafters.policies import policy_sources
from treespec.errors import ConfigError
from treespec.eval import llama_cpp
from treespec.eval.bench import PassCounter, draft_footprint, hf_method, llama_cpp_method, run_bench, treespec_method
from treespec.eval.reporting import acceptance_by_source, bench_table, write_table
from treespec.models.lean import lean_decoder
from treespec.models.loading import gguf_file

HF_METHODS = ("hf_generate", "hf_assisted")
LLAMA_CPP_METHODS = ("llama_cpp", "llama_cpp_lookup")  # the same GGUF through llama.cpp (make baselines)
LOOKUP_TOKENS = 10  # llama_cpp_lookup: tokens drafted per pass by prompt lookup


@dataclass
class BenchSchema(PairSpec):
    data: DataSpec = field(default_factory=DataSpec)
    hardware: HardwareSpec = field(default_factory=HardwareSpec)
    methods: list[str] = field(default_factory=lambda: ["hf_generate", "hf_assisted", "autoregressive", "chain",
                                                        "kary", "sequoia", "dynamic"])
    trees: dict[str, TreeSpec] = field(default_factory=dict)  # treespec method name -> its tree
    method_drafts: dict[str, str] = field(default_factory=dict)  # treespec method name -> its draft, if not the pair's
    samplings: list[SamplingSpec] = field(default_factory=list)
    max_new_tokens: int = 128
    batch_size: int = 1  # > 1: prompts in groups of B, decoded as one batch by every method


def run(cfg: DictConfig) -> list[dict]:
    model, hardware = cli.to_spec(ModelSpec, cfg.model), cli.to_spec(HardwareSpec, cfg.hardware)
    samplings = {s.name: sampling_config(s) for s in (cli.to_spec(SamplingSpec, s) for s in cfg.samplings)}
    methods, size = list(cfg.methods), int(cfg.batch_size)
    unknown = [m for m in methods if m not in HF_METHODS + LLAMA_CPP_METHODS and m not in cfg.trees]
    if unknown:
        raise ConfigError(f"methods {unknown} are neither {HF_METHODS + LLAMA_CPP_METHODS} nor keys of trees")
    llama = [m for m in methods if m in LLAMA_CPP_METHODS]
    gguf = gguf_file(cfg.target) if llama else None
    reason = llama_cpp.available() if llama else None
    if llama and reason is None and gguf is not None:
        reason = llama_cpp.first_pass_fails(gguf, cli.runtime(cfg).threads or torch.get_num_threads())
    if llama and (reason or gguf is None):
        methods = [m for m in methods if m not in LLAMA_CPP_METHODS]
        print(f"{', '.join(llama)} left out: " + (reason or f"{cfg.target} is not a built-in GGUF model"), flush=True)
    if size < 1:
        raise ConfigError(f"batch_size must be >= 1, got {size}")
    if size > 1 and "hf_assisted" in methods:
        methods.remove("hf_assisted")
        print(f"batch size {size}: hf_assisted left out (transformers' assisted generation takes one prompt at a time)")
    if not methods:
        raise ConfigError("no method left to run (hf_assisted takes one prompt at a time)")
    trees = {m: cli.to_spec(TreeSpec, cfg.trees[m]) for m in methods if m not in HF_METHODS + LLAMA_CPP_METHODS}
    if size == 1:
        for tree in trees.values():
            check_hardware(tree, hardware)
    session = open_session(model, cli.runtime(cfg), hardware, target=cfg.target, draft=cfg.draft,
                           sampling=next(iter(samplings.values())), progress=cli.progress_bar())
    print(f"bench on {session.describe()}", flush=True)
    prompts = load_data(cli.to_spec(DataSpec, cfg.data), session.tokenizer)
    groups = [prompts[i: i + size] for i in range(0, len(prompts), size)]
    if size > 1:
        print(f"batch size {size}: profile {session.profile(size)[1]}", flush=True)
    eos = session.tokenizer.eos_token_id
    pad = session.tokenizer.pad_token_id or eos or 0
    counter = PassCounter(session.target)
    choices = {(name, m): session.policy(tree, sampling, size) for name, sampling in samplings.items()
               for m, tree in trees.items()}
    decoders, footprints = {}, {}  # footprints: per treespec method, its draft's cost c and added weights
    llms = {m: llama_cpp.LlamaCpp(gguf, torch.get_num_threads(), lookup=LOOKUP_TOKENS if m == "llama_cpp_lookup" else 0)
            for m in methods if m in LLAMA_CPP_METHODS}
    for name in samplings:
        for method in methods:
            if method in llms:
                decoders[name, method] = llama_cpp_method(llms[method], eos)
            elif method in HF_METHODS:
                assistant = session.other_draft(model.assistant or cfg.draft) if method == "hf_assisted" else None
                decoders[name, method] = hf_method(session.target, counter, eos, pad, assistant)
            else:
                draft_name = cfg.method_drafts.get(method, cfg.draft)
                draft = session.other_draft(draft_name)
                decoders[name, method] = treespec_method(session.target, draft, choices[name, method].policy, eos,
                                                         session.draft_vocab if draft_name == cfg.draft else None)
                if method not in footprints:
                    footprints[method] = {"draft": draft_name if "model" in policy_sources(choices[name, method].policy)
                                          else None, **draft_footprint(session.target, draft, choices[name, method].policy)}

    def info(sampling: str, method: str) -> dict:
        choice = choices.get((sampling, method))
        return {"predicted_accepted": choice.info.get("predicted_accepted") if choice else None,
                "predicted_speedup": choice.info.get("predicted_speedup") if choice else None}

    out_dir = cli.output_dir()
    with open(out_dir / "bench_rows.jsonl", "w") as row_file, \
            tqdm(total=len(groups) * len(samplings) * len(methods), desc="bench", unit="run") as bar:
        def on_row(row: dict) -> None:
            row_file.write(json.dumps(row) + "\n")
            bar.update(1)

        rows = run_bench(decoders, groups, samplings, seed=cfg.seed, max_new_tokens=cfg.max_new_tokens,
                         reference="hf_generate" if "hf_generate" in methods else "autoregressive", info=info,
                         on_row=on_row)
    table = bench_table(rows)
    for row in table:
        row["batch_size"] = size
        row.update(footprints.get(row["method"], {}))
    settings = {"config": OmegaConf.to_container(cfg, resolve=True), "threads": torch.get_num_threads(),
                "assistant": model.assistant or cfg.draft, "batch_size": size,
                "hardware": {**session.summary(), **({"batch_profile": session.profile(size)[1]} if size > 1 else {})},
                "policies": {f"{s}/{m}": c.info for (s, m), c in choices.items()}}
    counts: dict[str, list] = {}  # trees from several sources: acceptance by source and depth, per sampling/method
    for row in rows:
        if "source_counts" in row:
            counts.setdefault(f"{row['sampling']}/{row['method']}", []).append(row["source_counts"])
    settings["acceptance_by_source"] = {key: acceptance_by_source(tables) for key, tables in counts.items()}
    lean = lean_decoder(session.target)  # one row's attention in one task or two per kv head, as measured here
    if lean is not None and lean.native is not None:
        settings["head_split"] = lean.native.head_split.summary()
    print(write_table(out_dir, "bench", table, settings))
    print(f"-> {out_dir}")
    return table


if __name__ == "__main__":
    torch.set_grad_enabled(False)
    cli.run_app(run, "bench", {"bench_schema": BenchSchema})
