"""Settings from the environment."""

from __future__ import annotations

import os
import pwd
import re
import shutil
from pathlib import Path

from .common import POOL_RE, SSHD_CANDIDATES, permanent


# --- configuration -------------------------------------------------------------------------------


class Config:
    def __init__(self, env: dict[str, str]) -> None:
        self.env = env
        self.pool = env.get("AUTOSCALER_POOL") or "default"
        if not POOL_RE.fullmatch(self.pool):
            permanent(f"invalid AUTOSCALER_POOL {self.pool!r}")
        home = env.get("HOME") or self._passwd().pw_dir
        state = env.get("XDG_STATE_HOME") or os.path.join(home, ".local", "state")
        root = env.get("LOCAL_ROOT") or os.path.join(state, "autoscaler-python-local", self.pool)
        # Canonical, because destroy compares it with /proc/*/fd link targets and sshd command lines.
        self.root = Path(os.path.realpath(root))

    @staticmethod
    def _passwd() -> pwd.struct_passwd:
        try:
            return pwd.getpwuid(os.getuid())
        except KeyError:
            permanent(f"uid {os.getuid()} has no passwd entry: sshd cannot log in as it")

    def port_range(self) -> range:
        """LOCAL_PORT_RANGE, checked only by create (a bad range must not block destroy)."""
        text = self.env.get("LOCAL_PORT_RANGE") or "20000-39999"
        match = re.fullmatch(r"(\d{1,5})-(\d{1,5})", text)
        if not match or not 1 <= int(match[1]) <= int(match[2]) <= 65535:
            permanent(f"invalid LOCAL_PORT_RANGE {text!r} (want LOW-HIGH within 1-65535)")
        return range(int(match[1]), int(match[2]) + 1)

    def sshd(self) -> str:
        """Absolute path of sshd (sshd refuses to run from a relative one)."""
        candidates = [self.env.get("LOCAL_SSHD") or "", shutil.which("sshd") or "", *SSHD_CANDIDATES]
        for candidate in candidates:
            if candidate and os.access(candidate, os.X_OK) and os.path.isfile(candidate):
                return os.path.realpath(candidate)
        permanent("openssh-server is not installed (no sshd found; set LOCAL_SSHD to its path)")

    def login_user(self) -> str:
        """sshd logs in as the current user and runs every command through its login shell."""
        entry = self._passwd()
        if os.path.basename(entry.pw_shell) in ("nologin", "false"):
            permanent(
                f"the login shell of {entry.pw_name} is {entry.pw_shell}: "
                f"sshd runs commands through it, give {entry.pw_name} a real shell"
            )
        if not shutil.which("ssh-keygen"):
            permanent("ssh-keygen is not installed (package openssh-client)")
        return entry.pw_name
