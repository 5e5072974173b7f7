"""Processes, ports and directory trees of this host."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
from pathlib import Path


# --- processes -----------------------------------------------------------------------------------


def read_proc(pid: int, name: str) -> bytes:
    try:
        with open(f"/proc/{pid}/{name}", "rb") as f:
            return f.read()
    except OSError:
        return b""


def all_pids() -> list[int]:
    return [int(name) for name in os.listdir("/proc") if name.isdigit()]


def signal_all(pids: set[int], sig: signal.Signals) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)


def used_tcp_ports() -> set[int]:
    """Every TCP port bound on this host right now."""
    ports: set[int] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError):
            for line in Path(table).read_text().splitlines()[1:]:
                fields = line.split()
                if len(fields) > 1:
                    ports.add(int(fields[1].rsplit(":", 1)[1], 16))
    return ports


def answers_ssh(port: int) -> bool:
    """The port accepts a connection and sends an SSH banner."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=2) as conn:
            return conn.recv(256).startswith(b"SSH-2.0-")
    except OSError:
        return False


def remove_tree(path: Path) -> None:
    """rm -rf, also through directories a job made read-only (Go's module cache)."""
    if not path.exists() and not path.is_symlink():
        return
    if path.is_symlink() or not path.is_dir():
        path.unlink()
        return
    try:
        shutil.rmtree(path)
    except OSError:
        for directory, _, _ in os.walk(path):
            with contextlib.suppress(OSError):
                os.chmod(directory, 0o700)
        shutil.rmtree(path)
