"""Tree shapes under their first name: see treespec.decode.tree."""

from treespec.decode.tree import DraftTree, TreeShape, chain, kary

__all__ = ["DraftTree", "TreeShape", "chain", "kary"]
