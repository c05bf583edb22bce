"""Busy-loop processes beside a measurement (``--busy N`` in the benchmarks): a machine its other work keeps loaded."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["busy_loops"]


@contextmanager
def busy_loops(count: int, *, settle_s: float = 2.0) -> Iterator[None]:
    """Run ``count`` busy-loop processes for the block (waiting ``settle_s`` first so they hold their cores), print
    the load average after it, and stop them however the block ends."""
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(count)]
    try:
        if hogs:
            time.sleep(settle_s)
        yield
        if hogs:
            print(f"beside {len(hogs)} busy-loop processes: load average {os.getloadavg()[0]:.1f} over the last minute")
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()
