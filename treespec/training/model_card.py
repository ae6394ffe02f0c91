"""The model card of a draft trained by experiments/train_draft.py, written from its training summary.

`model_card(summary, draft)` -> the README.md text: how the draft was made (data, architecture, training,
held-out agreement); measurements against the target are added by their own commands. `summary` is the
run's training_summary.json (with its `config`), `draft` the exported model (its config gives the shapes).
"""

from __future__ import annotations

import torch

from treespec.eval.corpus import FOLLOWUPS, SELF


def model_card(summary: dict, draft: torch.nn.Module) -> str:
    """The model card: how the draft was made (measurements against the target are added by their commands)."""
    start = (f"Started from the trained draft `{summary['config']['draft']['init_from']}` (its own card gives that "
             "run), then: " if summary["config"]["draft"].get("init_from") else "")
    cfg, c = summary["config"], draft.config
    heldout = summary["final_heldout"]
    if not cfg["draft"].get("init_from"):
        chosen = "the most frequent in the answers"
    elif summary.get("output_vocab_start"):  # vocab.grow added tokens to the start draft's
        chosen = (f"the start draft's {summary['output_vocab_start']} plus the most frequent answer tokens it lacked, "
                  "their rows taken from the target")
    else:
        chosen = "the start draft's"
    vocab = (f"an LM head over {summary['output_vocab']} tokens ({chosen}; they cover "
             f"{100 * summary['output_vocab_answer_coverage']:.2f}% of answer tokens), initialised from the target's "
             "output rows; logits elsewhere are -inf, so q is 0 outside that set")
    if cfg["draft"]["kind"] == "eagle":
        title = "EAGLE-style draft head"
        layers, unroll = cfg["draft"].get("eagle_feature_layers") or [], cfg["draft"].get("eagle_unroll", 1)
        reads = ("the target's last hidden state (Li et al. 2024)" if not layers else
                 f"the target's hidden states after layers {layers}, fused (EAGLE-3's ingredients, Li et al. 2025)")
        usage = (f"It reads {reads}: `EagleDraftModel`, `import treespec` "
                 f"registers it. Pass it as the draft to `treespec.generate` with `{summary['target']}` as the target; "
                 "it cannot decode on its own, so transformers' assisted generation cannot use it.")
        feature = ("target's feature (last hidden state after its final norm)" if not layers else
                   f"fused target feature: one projection ({len(layers)}x{c.hidden_size} -> {c.hidden_size}) of the target's "
                   f"hidden states after layers {layers}, each through its final norm (EAGLE-3's low, mid and top features)")
        one = c.num_hidden_layers == 1
        if cfg["draft"].get("init_from"):
            origin = "the start draft's" + ("" if one else ", fresh ones below its depth")
        else:
            init_layer = cfg["draft"]["eagle_init_layer"]
            origin = (("" if one else "the first ")
                      + (f"copied from the target's layer {init_layer}" if init_layer is not None else "freshly initialised")
                      + ("" if one else ", the others fresh"))
        decoder = f"one decoder layer ({origin}" if one else f"{c.num_hidden_layers} decoder layers ({origin}"
        architecture = (f"- At draft position j: fc([f_(j-1), e(x_j)]) (2x{c.hidden_size} -> {c.hidden_size}) with f the "
                        f"{feature} and e the target's own token "
                        f"embedding (shared at run time, not stored), then {decoder}"
                        + (", then trained); its output estimates f_j.\n" if not layers else
                           ", then trained); its output is the feature it reads one tree level down.\n")
                        + f"- {vocab}" + (" (frozen in training)." if cfg["draft"]["freeze_head"] else
                                          " (trained with the rest: `draft.freeze_head=false`)."))
        objective = ("Cross-entropy against the target's top-k distribution at every answer position"
                     + (f" plus {cfg['draft']['feature_weight']} x smooth-L1 between the head's output and the target's next "
                        "feature" if not layers else " (a loss on tokens only: no feature regression)")
                     + f", with {cfg['draft']['feature_noise']} relative noise on input features"
                     + (", averaged with the same loss one tree level down (the head reading its own output "
                        "features, attending as a depth-2 node does)" if unroll == 2 else "")
                     + (f", averaged with the same loss {unroll - 1} tree levels down (training-time test: the head "
                        f"reading its own output features, attending as nodes 1..{unroll - 1} levels below the root do)"
                        if unroll > 2 else ""))
    else:
        title = "Draft"
        usage = (f"A {c.num_hidden_layers}-layer Llama-style causal LM (`TreespecDraftForCausalLM`, `import treespec` "
                 "registers it): load it with `treespec.models.load_model(<this directory>)` or "
                 "`AutoModelForCausalLM.from_pretrained(<this directory>)` after `import treespec`; any code that takes "
                 "a causal-LM draft can use it (transformers' assisted generation included).")
        architecture = (f"- Decoder layers copied from the target's layers {cfg['draft']['init_layers']} (width "
                        f"{c.hidden_size}, {c.num_attention_heads} heads, {c.num_key_value_heads} KV heads, MLP "
                        f"{c.intermediate_size}), then trained; the target's final norm.\n"
                        f"- Input embedding: rank-{c.embed_rank} factorisation (SVD of the target's embedding, then "
                        f"trained).\n- {vocab}.")
        objective = ("Cross-entropy against the target's top-k distribution at every answer position (forward KL up "
                     "to a constant)")
    deeper = sorted(int(k.rpartition("level")[2]) for k in heldout if k.startswith("greedy_agree_top1_level"))
    levels = ("\nGreedy answers, a node d-1 levels below the root (the path before it being the target's): top-1 "
              "agreement " + ", ".join(f"d={d}: {heldout[f'greedy_agree_top1_level{d}']:.4f}" for d in deeper) + "."
              if deeper else "")
    by_part = ", ".join(f"{name} {heldout[f'{name}_agree_top1']:.4f}" for name in ("pool", SELF, FOLLOWUPS)
                        if f"{name}_agree_top1" in heldout)
    by_part = f"\nBy corpus part, top-1 agreement: {by_part}." if by_part else ""
    own, second = summary.get("self_prompts"), summary.get("followups")
    parts = ((f"\n- Self prompts: {summary['self_prompt_answers']} of the answers (in `{own['dir']}`, "
              f"{own['answer_tokens']} answer tokens) reply to user requests the target wrote itself after its chat "
              "template's user-turn prefix (`treespec.training.self_prompts`, Magpie), screened against MT-Bench and "
              "HumanEval." if own else "")
             + (f"\n- Second turns: {summary['followup_answers']} of the answers (in `{second['dir']}`, "
                f"{second['answer_tokens']} answer tokens) reply to a follow-up question "
                "(`treespec.training.prompt_pool.followup`) asked after the target's own first answer."
                if second else ""))
    in_all = " in all (the parts below included)" if own or second else ""
    pool_answers = summary["answers"] - summary.get("followup_answers", 0) - summary.get("self_prompt_answers", 0)
    return f"""# {title} for {summary['target']}, trained by treespec

{usage}

## Data
- Prompts: `treespec.training.prompt_pool.build_prompt_pool({cfg['pool']['size']}, seed={cfg['seed']})`: template prompts in
  MT-Bench's categories plus everyday chat and HumanEval-style code completion, checked to share no 8-word
  sequence with MT-Bench or HumanEval. {pool_answers} of them were answered.
- Answers: the target's own, chat template applied, up to {cfg['generate']['max_new_tokens']} new tokens, modes
  {summary['answers_by_mode']}; {summary['answer_tokens']} answer tokens{in_all}, kept in the corpus
  `{summary['corpus']['dir']}` ({summary['corpus']['shards']} shards of pool prompts, {summary['corpus']['bytes'] / 1e6:.1f} MB;
  {summary['generation_seconds'] / 3600:.2f} h of generation{' in all' if in_all else ''} in \
{', '.join(summary['corpus']['precision'])} on
  {'; '.join(summary['corpus']['machines'])}). The target's top-{cfg['teacher']['keep_top']} log-probabilities
  at every answer position were recomputed from them by teacher forcing\
{' (the target in bf16)' if summary.get('teacher_precision') == 'bfloat16' else ''}.{parts}

## Architecture
{architecture}
- {summary['parameters'] / 1e6:.2f}M parameters, stored as {cfg['export']['dtype']} ({summary['weights_mb']} MB).

## Training
{start}{objective}; AdamW (lr {cfg['train']['lr']}, cosine to {cfg['train']['min_lr']}), about
{cfg['train']['tokens_per_batch']} tokens per batch, {summary['train_steps']} steps
({summary['train_seconds'] / 3600:.2f} h on {summary['train_machine']}, {summary['train_threads']} torch threads\
{', the forward in bf16 autocast' if summary.get('train_precision') == 'bfloat16' else ''}).
Held-out answers ({100 * cfg['train']['holdout_fraction']:.0f}%, teacher-forced): top-1 agreement with the target
{heldout.get('agree_top1', float('nan')):.4f} (greedy answers {heldout.get('greedy_agree_top1', float('nan')):.4f}),
target argmax in the draft's top 4: {heldout.get('target_in_top4', float('nan')):.4f}.{levels}{by_part}

Reproduce: `python experiments/train_draft.py` (config `conf/train_draft.yaml`; `training_summary.json`
holds the exact configuration of this run).
"""


def medusa_card(summary: dict) -> str:
    """The model card of Medusa heads trained by experiments/train_medusa.py (treespec.training.medusa), from
    their training summary."""
    cfg, machine = summary["config"], summary["machine"]
    heads, final, start = summary["num_heads"], summary["final_heldout"], summary["heldout_at_start"]
    width = cfg["train"]
    rows = "\n".join(f"| {k} | {start[f'head{k}_agree_top1']:.4f} | {final[f'head{k}_agree_top1']:.4f} | "
                     f"{final[f'head{k}_top3']:.4f} |" for k in range(1, heads + 1))
    isa = " ".join(machine["isa"]) or "none of avx2/avx512f/avx512_bf16/amx"
    notes = f"\n{summary['notes']}" if summary.get("notes") else ""
    proposal = summary.get("proposal_vocab")
    vocab = (f"\n- They propose from the {proposal['size']} tokens most frequent in the training answers (with the "
             f"target's special tokens), stored with them (`MedusaHeads.vocab`): the root call reads those rows of the "
             f"LM head only. They cover {100 * proposal['heldout_coverage']:.1f}% of the held-out answer tokens; q is "
             "renormalised over them, so verification stays lossless.") if proposal else ""
    return f"""# Medusa heads for {summary['target']}, trained by treespec

{heads} Medusa heads (Cai et al. 2024; `MedusaHeads` in `treespec/models/medusa_head.py`, `import treespec` registers
it): head k reads the target's last hidden state h_t (after its final norm) and guesses token t+k+1 as
`lm_head(h + SiLU(W_k h + b_k))`, with the target's own LM head (shared at run time, frozen, not stored here). Pass
them as the draft to `treespec.generate` with `{summary['target']}` as the target
(`treespec.models.load_model("smollm2-135m-medusa")`); every node at depth d of a tree gets head d+1's proposal, so
trees reach at most {heads} levels below the root (`MedusaDrafter.max_depth`; the policies cap their trees there).
They cannot decode on their own.

## Data
- The target's own answers in the committed corpus `{summary['corpus']}`: the first {len(summary['train_shards'])}
  shards in pool order ({', '.join(summary['train_shards'])}): {summary['answers']} answers,
  {summary['answer_tokens']} answer tokens ({summary['positions']} positions with their head labels).
- Held out: {', '.join(summary['heldout_shards'])} (the corpus's last shards, never trained on;
  {summary['heldout_positions']} positions).
- Teacher forcing with the target in {summary['teacher_precision']} ({summary['teacher_seconds'] / 60:.1f} min): its
  normed last hidden states and its top-{cfg['teacher']['keep_top']} log-probabilities at every answer position.

## Architecture
- {heads} residual blocks h + SiLU(W h + b) ({summary['parameters'] / 1e6:.2f}M parameters, K x (H^2 + H) with
  H = {summary['hidden_size']}), W and b started at zero
  (each head started as the target's own next-token guess); stored as {cfg['export']['dtype']}
  ({summary['weights_mb']} MB).{vocab}

## Training
Head k's loss: cross-entropy against the target's top-{cfg['teacher']['keep_top']} distribution (renormalised) at
position t+k, from h_t, for every position t from the prompt's last-but-{heads} on (forward KL up to a constant);
the heads' losses averaged. AdamW (lr {width['lr']}, cosine to {width['min_lr']} after {width['warmup_steps']}
warm-up steps), {width['positions_per_batch']} random positions per step, {summary['train_steps']} steps
({summary['train_seconds'] / 60:.1f} min{', bf16 autocast' if summary['train_precision'] == 'bfloat16' else ''}).
Ran on {machine['cpu']} [ISA: {isa}], {machine['threads']} torch threads, {summary['date']}.{notes}

Held-out, teacher-forced: top-1 agreement of head k with the target's greedy token k positions after the root
(k + 1 after h's token; before training = the target's own next-token guess), and that token in the head's top 3:

| head k | top-1, start | top-1, trained | in top 3 |
|---|---|---|---|
{rows}

Reproduce: `{summary['command'].strip()}` (config `conf/train_medusa.yaml`; `training_summary.json` holds this
run's configuration).
"""
