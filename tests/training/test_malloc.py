"""glibc malloc told to keep freed memory (treespec.training.memory), checked in fresh processes."""

import platform
import subprocess
import sys

import pytest

pytestmark = pytest.mark.skipif(platform.system() != "Linux" or platform.libc_ver()[0] != "glibc",
                                reason="mallopt is glibc's")

FREED = """
import os, sys
from treespec.training.memory import keep_freed_memory
if sys.argv[1] == "keep":
    assert keep_freed_memory()
page = os.sysconf("SC_PAGE_SIZE")
def resident():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * page
block = b"\\x01" * (64 * 2**20)  # written, so resident
before = resident()
del block
print(before - resident())
"""


def released_bytes(mode: str) -> int:
    """Bytes the process's resident memory fell by when a 64 MiB block was freed."""
    done = subprocess.run([sys.executable, "-c", FREED, mode], capture_output=True, text=True, check=True)
    return int(done.stdout.split()[-1])


def test_freed_blocks_stay_in_the_process_only_when_asked():
    assert released_bytes("default") >= 60 * 2**20  # glibc's default: a large block is mmap-ed and unmapped
    assert released_bytes("keep") < 2**20
