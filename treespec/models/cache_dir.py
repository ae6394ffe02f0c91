"""Where treespec caches derived files: `cache_root()` ($TREESPEC_CACHE, default ~/.cache/treespec)."""

from __future__ import annotations

import os
from pathlib import Path


def cache_root() -> Path:
    """Where treespec caches derived files ($TREESPEC_CACHE, default ~/.cache/treespec)."""
    return Path(os.environ.get("TREESPEC_CACHE", Path.home() / ".cache" / "treespec"))
