"""Planning from measurements: acceptance, Sequoia's optimizer, costs t(B, n) and c_B(w), the planner, hardware.

    acceptance   measuring P[depth, rank] from real decoding with a spine tree
    optimizer    Sequoia's DP: the tree of n nodes and d levels with the most expected tokens (pure math)
    costs        `LatencyProfile` (measured ms by batch size) and `StepCosts` (one batch size, relative)
    planner      `plan_tree`: the tree with the best predicted tokens per second at the costs' batch size
    hardware     `auto_profile` (dtype, layout and profile, measured once per machine and cached), `batch_profile`

May import `treespec.errors`, `treespec.models`, `treespec.decode`, `treespec.drafters` and `treespec.api`.
"""
