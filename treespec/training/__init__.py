"""Training a draft for a target by self-distillation, apart from the decoding engine.

    prompt_pool   template prompts (lists in prompt_templates.yaml), disjoint from MT-Bench and HumanEval
    self_prompts  user requests the target writes itself (Magpie), screened against MT-Bench and HumanEval
    corpus        the target's answers as compact token-id shards with a manifest (kept in the repository)
    distill_data  generating answers, output vocabulary, target features and soft targets by teacher forcing
    draft_model   the plain causal-LM draft architecture (factorised embedding, reduced output vocabulary)
    train         losses, batching and initialisation for the plain draft and the EAGLE head
    memory        glibc malloc told to keep freed memory while training (no page faults per step)
    model_card    the trained draft's README.md, written from its training summary
    position_agreement  a draft's teacher-forced agreement where decoding passes start and elsewhere

Importing this package is cheap; `experiments/train_draft.py` drives the stages.
"""
