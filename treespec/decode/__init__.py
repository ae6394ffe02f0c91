"""The decoding engine: one loop for B >= 1 rows, and the pure tensor functions it orders.

    engine     `Decoder` / `decode`: draft -> flatten -> one target pass -> verify -> commit, per step, timed;
               the `Drafter` and `TreePolicy` protocols, `StepOutcome`, `Generation`, `StepStats`
    tree       `TreeShape` (parents in topological order, children in rank order), `DraftTree`, chain, kary
    mask       flattening B trees into one pass: token ids, positions, an additive attention mask
    verify     the lossless acceptance rules (greedy, Sequoia's without replacement, SpecInfer's, deterministic)
    sampling   logits -> processed probabilities (temperature, top-k, top-p) and the random draws
    cache      the preallocated KV cache, keeping the accepted slots of right-padded rows
    timing     one clock (synchronises CUDA only)

May import `treespec.errors` and `treespec.models`; nothing here imports drafters, planning, evaluation, training
or the app layer.
"""
