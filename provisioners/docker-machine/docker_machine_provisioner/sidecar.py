"""The state file beside each machine: what docker-machine cannot keep for the autoscaler."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
from typing import Any, Iterator

from .config import Config


# --- state files ----------------------------------------------------------------------------------


class Sidecar:
    def __init__(self, config: Config, name: str) -> None:
        self.name = name
        self.path = config.state_dir / f"{name}.json"
        self.lock_path = config.state_dir / f"{name}.lock"
        self.user_data = config.state_dir / f"{name}.user-data"

    def read(self) -> dict[str, Any] | None:
        try:
            data = json.loads(self.path.read_text())
        except (OSError, ValueError):
            return None
        return data if isinstance(data, dict) else None

    def labels(self) -> dict[str, str]:
        labels = (self.read() or {}).get("labels")
        return labels if isinstance(labels, dict) else {}

    def write(self, data: dict[str, Any]) -> None:
        tmp = self.path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(data, sort_keys=True) + "\n")
        os.replace(tmp, self.path)

    def creating(self) -> bool:
        """Whether a create holds this machine's lock right now."""
        try:
            fd = os.open(self.lock_path, os.O_RDONLY)
        except OSError:
            return False
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            return False
        except OSError:
            return True
        finally:
            os.close(fd)

    @contextlib.contextmanager
    def locked(self) -> Iterator[bool]:
        """Holds the create lock; yields False when another create has it."""
        fd = os.open(self.lock_path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                yield False
                return
            yield True
        finally:
            os.close(fd)

    def remove(self) -> None:
        for path in (self.path, self.user_data, self.lock_path):
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
