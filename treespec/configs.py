"""The configuration schemas and builders under their first name: see treespec.app.configs (`load_pair` is the
public entry point: a target, an optional draft and the tokenizer, checked to fit together)."""

from treespec.app.configs import *  # noqa: F403
from treespec.app.configs import LoadedPair, load_pair, resolve_hardware

__all__ = ["LoadedPair", "load_pair", "resolve_hardware"]
