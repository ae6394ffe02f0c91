"""Evaluation: prompt sets, the committed corpus, the losslessness certificate, and reports of runs.

    data          prompt sets, offline: MT-Bench, HumanEval, held-out pool and self prompts, JSONL files
    prompt_pool   template prompts (lists in prompt_templates.yaml), disjoint from MT-Bench and HumanEval
    corpus        the self-distillation corpus: compact token-id shards with a manifest, kept in the repository
    draft_vocab   a pair's draft vocabulary, ranked on that corpus
    certify       the exact law of the first tokens, seeded runs of the engine, chi-square tests with stated power
    reporting     rows and summaries of decoding runs (metrics.jsonl, summary.json, bench tables)

May import `treespec.errors`, `treespec.models`, `treespec.decode`, `treespec.drafters`, `treespec.api` and
`treespec.plan`; never training or the app layer.
"""
