"""How close a faster version of the target is to the model itself (config: conf/target_agreement.yaml).

    python experiments/target_agreement.py                          # the default target, 20 held-out requests
    python experiments/target_agreement.py model=qwen2.5-coder data=humaneval data.limit=10

The fp32 target answers each prompt greedily (`max_new_tokens`); then the fp32 target, the target with its 4-bit-grid
layers held as 4-bit codes (model.target_weights=int4, treespec.models.quantize.quantize_target_weights), the same with
int8 activations where the kernels have them (model.target_weights=int4-a8, quantize.set_activations) and, where
llama-cpp-python is installed (make baselines) and the target is a built-in GGUF model, llama.cpp's run of that GGUF
read every prompt + answer (teacher forcing). Writes agreement.yaml: the share of answer positions where each pair
of them predicts the same next token (treespec.eval.agreement).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
import yaml
from omegaconf import DictConfig
from tqdm import tqdm

from treespec.api import autoregressive
from treespec.app import cli
from treespec.app.configs import DataSpec, HardwareSpec, ModelSpec, PairSpec, load_data, with_target_weights
from treespec.app.session import open_session
from treespec.eval import llama_cpp
from treespec.eval.agreement import agreement, top1_predictions
from treespec.models import int4_cpu
from treespec.models.loading import gguf_file
from treespec.models.quantize import INT8_ACTIVATIONS, set_activations


@dataclass
class TargetAgreementSchema(PairSpec):
    data: DataSpec = field(default_factory=DataSpec)
    max_new_tokens: int = 128


def run(cfg: DictConfig) -> dict:
    model = cli.to_spec(ModelSpec, cfg.model)
    model.target_weights = None  # the fp32 model first: the reference
    session = open_session(model, cli.runtime(cfg), HardwareSpec(name="none"), target=cfg.target, with_draft=False,
                           tune=False)
    prompts = load_data(cli.to_spec(DataSpec, cfg.data), session.tokenizer)
    sequences, starts = [], []
    for _, ids in tqdm(prompts, desc="fp32 answers", unit="prompt"):
        answer = autoregressive(session.target, ids, max_new_tokens=cfg.max_new_tokens).tokens
        sequences.append(list(ids) + answer)
        starts.append(len(ids))
    predictions = {"fp32": top1_predictions(session.target, sequences, starts)}
    int4 = with_target_weights(session.pair, "int4").target  # in place: the same modules, 4-bit-grid layers as codes
    predictions["int4"] = top1_predictions(int4, sequences, starts)
    why = int4_cpu.int8_unavailable()
    if why is None:
        predictions[INT8_ACTIVATIONS] = top1_predictions(set_activations(int4, "int8"), sequences, starts)
    else:
        print(f"{INT8_ACTIVATIONS} left out: {why}")
    gguf, reason = gguf_file(cfg.target), llama_cpp.available()
    if gguf is not None and reason is None:
        reason = llama_cpp.first_pass_fails(gguf, torch.get_num_threads())
    if gguf is not None and reason is None:
        llm = llama_cpp.LlamaCpp(gguf, torch.get_num_threads(), all_logits=True)
        predictions["llama.cpp"] = llm.top1(sequences, starts)
    else:
        print(f"llama.cpp left out: {reason or f'{cfg.target} is not a built-in GGUF model'}")
    names = list(predictions)
    pairs = {f"{a} vs {b}": round(agreement(predictions[a], predictions[b]), 5)
             for i, a in enumerate(names) for b in names[i + 1:]}
    result = {"settings": {"target": cfg.target, "data": cfg.data.name, "prompts": len(prompts),
                           "max_new_tokens": cfg.max_new_tokens, "positions": sum(len(p) for p in predictions["fp32"]),
                           "gguf": str(gguf) if gguf else None, "threads": torch.get_num_threads()},
              "top1_agreement": pairs}
    path = cli.output_dir() / "agreement.yaml"
    path.write_text(yaml.safe_dump(result, sort_keys=False))
    for name, value in pairs.items():
        print(f"teacher-forced top-1 agreement, {name}: {value:.4f}")
    print(f"-> {path}")
    return result


if __name__ == "__main__":
    torch.set_grad_enabled(False)
    cli.run_app(run, "target_agreement", {"target_agreement_schema": TargetAgreementSchema})
