"""The application layer: where Hydra configs and command lines meet the library.

    configs   the config schemas (conf/; `RuntimeSpec` is the runtime group: device, dtype, layout, threads, seed)
              and the builders that turn them into engine objects (policies, pairs, hardware profiles, prompt sets)
    session   `open_session`: pair -> hardware -> policy, the one set-up the demo and every experiment call
    cli       `run_app`: schema registration, overrides checked before anything runs, one-line errors, progress bars
    demo      `python -m treespec.generate`

May import every other part of treespec but training; nothing outside app/ imports it (the compatibility module
`treespec.configs` re-exports `configs` for `load_pair`).
"""
