"""flock helpers: a create lock per machine and the root lock."""

from __future__ import annotations

import contextlib
import fcntl
import os
import time
from pathlib import Path
from typing import Iterator

from .common import LOCK_TIMEOUT, transient
from .config import Config


# --- locks ---------------------------------------------------------------------------------------


def acquire(path: Path, timeout: float) -> int | None:
    """Open path and take an exclusive flock on it within timeout; the fd, or None."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    deadline = time.monotonic() + timeout
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return fd
        except BlockingIOError:
            if time.monotonic() >= deadline:
                os.close(fd)
                return None
            time.sleep(0.05)


@contextlib.contextmanager
def root_lock(config: Config) -> Iterator[None]:
    """<root>/.lock: key lookups, port choices and removals never interleave."""
    fd = acquire(config.root / ".lock", LOCK_TIMEOUT)
    if fd is None:
        transient(f"timed out waiting for {config.root / '.lock'}")
    try:
        yield
    finally:
        os.close(fd)
