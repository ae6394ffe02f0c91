"""How close two versions of a target are: teacher-forced top-1 agreement on the same token sequences.

A faster target is only worth having if it is the same model, near enough: `top1_predictions` runs each sequence
through a model once (teacher forcing) and keeps its argmax next token at every position from `start` on;
`agreement` is the share of positions where two models' argmaxes are equal. llama.cpp's run of a GGUF takes part
through `LlamaCpp.top1` (treespec.eval.llama_cpp), so a quantized target can be compared with the fp32 model it
came from and with what llama.cpp computes from the same file.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch


@torch.inference_mode()
def top1_predictions(model: torch.nn.Module, sequences: Sequence[Sequence[int]], starts: Sequence[int]
                     ) -> list[torch.Tensor]:
    """For each sequence s [L] and start p: the model's argmax next token after each of s[p - 1 .. L - 2], [L - p]
    (the predictions of tokens s[p:] from the ones before them)."""
    device = next(model.parameters()).device
    out = []
    for sequence, start in zip(sequences, starts):
        logits = model(input_ids=torch.tensor([list(sequence)], device=device)).logits[0]  # [L, V]
        out.append(logits[start - 1: len(sequence) - 1].float().argmax(-1).cpu())
    return out


def agreement(first: Sequence[torch.Tensor], second: Sequence[torch.Tensor]) -> float:
    """Share of positions where two models' predictions (`top1_predictions`) are equal."""
    same = sum(int((a == b).sum()) for a, b in zip(first, second))
    total = sum(len(a) for a in first)
    return same / total if total else float("nan")
