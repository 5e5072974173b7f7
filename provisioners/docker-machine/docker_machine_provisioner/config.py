"""The settings, from the provisioner's environment."""

from __future__ import annotations

import hashlib
import os
import re
import shlex
import shutil
from pathlib import Path

from .errors import SECRETS, permanent, scrub

TEMPLATE_RE = re.compile(r"[a-zA-Z0-9][a-zA-Z0-9.-]*%s[a-zA-Z0-9.-]*|%s[a-zA-Z0-9.-]*")
DRIVER_RE = re.compile(r"[a-zA-Z0-9][a-zA-Z0-9_.-]*")
POOL_RE = re.compile(r"[a-z0-9][a-z0-9_-]{0,62}")


# --- configuration --------------------------------------------------------------------------------


def parse_options(text: str) -> list[str]:
    """DOCKER_MACHINE_OPTIONS as command-line flags. Any line break: one option a line (blank lines
    and lines starting with # are skipped). One line: shell words. Each option is `name=value`,
    `name` (a switch) or the same with leading dashes, as in MachineOptions."""
    if not text.strip():
        return []
    if "\n" in text:  # a TOML multi-line string: one option a line
        items = [line.strip() for line in text.splitlines()]
        items = [i for i in items if i and not i.startswith("#")]
    else:
        try:
            items = shlex.split(text)
        except ValueError as error:
            permanent(f"DOCKER_MACHINE_OPTIONS cannot be split into words: {error}")
    flags = []
    for item in items:
        flag = item if item.startswith("-") else f"--{item}"
        if not re.fullmatch(r"--?[A-Za-z0-9][A-Za-z0-9_-]*(=.*)?", flag, re.S):
            permanent(f"DOCKER_MACHINE_OPTIONS: {scrub(item)!r} is not an option (want name=value)")
        flags.append(flag)
        option, eq, value = flag.partition("=")
        if eq and value and re.search(r"key|secret|token|passw|credential|auth", option, re.I):
            SECRETS.append(value)
    return flags


class Config:
    def __init__(self, env: dict[str, str]) -> None:
        self.env = env
        self.pool = env.get("AUTOSCALER_POOL") or "default"
        if not POOL_RE.fullmatch(self.pool):
            permanent(f"invalid AUTOSCALER_POOL {self.pool!r}")
        self.autoscaler_id = env.get("AUTOSCALER_ID") or ""
        self.options = parse_options(env.get("DOCKER_MACHINE_OPTIONS") or "")
        template = env.get("DOCKER_MACHINE_NAME") or "autoscaler-%s"
        if template.count("%s") != 1 or not TEMPLATE_RE.fullmatch(template):
            permanent(f"DOCKER_MACHINE_NAME={template!r}: want a name with exactly one %s (letters, digits, - and .)")
        self.template = template
        home = env.get("HOME") or os.path.expanduser("~")
        state = env.get("XDG_STATE_HOME") or os.path.join(home, ".local", "state")
        self.state_dir = Path(env.get("DOCKER_MACHINE_STATE_DIR") or os.path.join(state, "autoscaler-docker-machine", self.pool))

    @property
    def driver(self) -> str:
        driver = (self.env.get("DOCKER_MACHINE_DRIVER") or "").strip()
        if not driver:
            permanent("DOCKER_MACHINE_DRIVER is not set (MachineDriver of [runners.machine])")
        if not DRIVER_RE.fullmatch(driver):
            permanent(f"DOCKER_MACHINE_DRIVER={driver!r} is not a driver name")
        return driver

    @property
    def binary(self) -> str:
        wanted = self.env.get("DOCKER_MACHINE") or "docker-machine"
        found = shutil.which(wanted, path=self.env.get("PATH")) if "/" not in wanted else wanted
        if not found or not os.access(found, os.X_OK):
            permanent(f"docker-machine not found ({wanted!r}); install it or set DOCKER_MACHINE")
        return found

    def timeout(self, name: str, default: int) -> int:
        text = (self.env.get(name) or "").strip()
        if not text:
            return default
        if not text.isdigit() or int(text) < 1:
            permanent(f"{name}={text!r}: want a number of seconds")
        return int(text)

    def machine_name(self, key: str) -> str:
        digest = hashlib.sha256(f"{self.autoscaler_id}\0{self.pool}\0{key}".encode()).hexdigest()[:12]
        slug = re.sub(r"[^a-z0-9]+", "-", key.lower()).strip("-")[:16].strip("-")
        return self.template.replace("%s", f"{slug}-{digest}" if slug else digest)

    def is_ours(self, name: str) -> bool:
        """Whether a name fits the template (so it may be a machine this provisioner made)."""
        head, tail = self.template.split("%s")
        return (name.startswith(head) and name.endswith(tail) and len(name) > len(head) + len(tail)
                and re.fullmatch(r"[a-z0-9-]+", name[len(head): len(name) - len(tail)]) is not None)

    def name_regex(self) -> str:
        # Names hold only letters, digits, "-" and ".", so "." is the one character to escape
        # (the pattern is a Go regular expression).
        head, tail = (part.replace(".", "\\.") for part in self.template.split("%s"))
        return f"^{head}[a-z0-9-]+{tail}$"
