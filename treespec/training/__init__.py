"""Training a draft for a target by self-distillation, apart from the decoding engine.

    config        the run's configuration: TrainDraftSchema and its parts (plain dataclasses)
    corpus_stages the stages that make the corpus: the prompt pool, the target's answers, self prompts, follow-ups
    run_corpus    where the run's corpus lives, its parts' headers, opening them (the format: treespec.eval.corpus)
    pipeline      teacher forcing, output vocabulary, training, export, and run_stages that runs them in order
    self_prompts  user requests the target writes itself (Magpie), screened against MT-Bench and HumanEval
    distill_data  generating answers, output vocabulary, target features and soft targets by teacher forcing
    train         losses, batching and initialisation for the plain draft and the EAGLE head
    memory        glibc malloc told to keep freed memory while training (no page faults per step)
    model_card    the trained draft's (or Medusa heads') README.md, written from its training summary
    medusa        Medusa heads by self-distillation on the committed corpus (experiments/train_medusa.py)
    position_agreement  a draft's teacher-forced agreement where decoding passes start and elsewhere

The stages live here; `experiments/train_draft.py` (config: conf/train_draft.yaml) is their Hydra entry point and
drives them. The template prompt pool is treespec.eval.prompt_pool, the corpus format treespec.eval.corpus and the
plain draft architecture treespec.models.draft_lm. Importing this package is cheap.
"""
