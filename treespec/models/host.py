"""Facts about the machine treespec runs on: where it caches derived files (`cache_root`) and the CPU's ISA flags
(`cpu_flags`)."""

from __future__ import annotations

import os
from pathlib import Path


def cache_root() -> Path:
    """Where treespec caches derived files ($TREESPEC_CACHE, default ~/.cache/treespec)."""
    return Path(os.environ.get("TREESPEC_CACHE", Path.home() / ".cache" / "treespec"))


def cpu_flags() -> set[str]:
    """The CPU's flags from /proc/cpuinfo (empty where there is none)."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return set()
    line = next((x for x in text.splitlines() if x.startswith("flags")), "")
    return set(line.partition(":")[2].split())
