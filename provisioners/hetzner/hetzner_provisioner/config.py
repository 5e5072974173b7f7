"""The settings, from the provisioner's environment."""

from __future__ import annotations

import hashlib
import re

from .errors import permanent

PREFIX_RE = re.compile(r"[a-z][-a-z0-9]{0,28}")


def truthy(name: str, value: str | None, default: bool) -> bool:
    if value is None or value.strip() == "":
        return default
    v = value.strip().lower()
    if v in ("1", "true", "yes", "on"):
        return True
    if v in ("0", "false", "no", "off"):
        return False
    permanent(f"{name}={value!r} is not a boolean (true/false)")


# --- configuration --------------------------------------------------------------------------------


class Config:
    def __init__(self, env: dict[str, str]) -> None:
        self.env = env
        self.pool = env.get("AUTOSCALER_POOL") or "default"
        self.autoscaler_id = env.get("AUTOSCALER_ID") or ""

    def get(self, name: str, default: str = "") -> str:
        return (self.env.get(name) or default).strip()

    def number(self, name: str, default: int, low: int, high: int) -> int:
        text = self.get(name)
        if not text:
            return default
        if not re.fullmatch(r"\d+", text) or not low <= int(text) <= high:
            permanent(f"{name}={text!r}: want a whole number in {low}..{high}")
        return int(text)

    def ids(self, name: str) -> list[int]:
        text = self.get(name)
        items = [t.strip() for t in text.split(",") if t.strip()]
        if not all(t.isdigit() for t in items):
            permanent(f"{name}={text!r}: want comma-separated numeric ids")
        return [int(t) for t in items]

    @property
    def token(self) -> str:
        token = self.env.get("HCLOUD_TOKEN") or ""
        if not token.strip():
            permanent("HCLOUD_TOKEN is not set")
        return token.strip()

    @property
    def prefix(self) -> str:
        prefix = self.get("HCLOUD_NAME_PREFIX", "autoscaler")
        if not PREFIX_RE.fullmatch(prefix):
            permanent(f"HCLOUD_NAME_PREFIX={prefix!r}: want a lowercase letter, then up to 28 of a-z 0-9 -")
        return prefix

    @property
    def ssh_user(self) -> str:
        return self.get("HCLOUD_SSH_USER", "root")

    @property
    def address_kind(self) -> str:
        default = "ipv4" if truthy("HCLOUD_PUBLIC_IPV4", self.env.get("HCLOUD_PUBLIC_IPV4"), True) else (
            "ipv6" if truthy("HCLOUD_PUBLIC_IPV6", self.env.get("HCLOUD_PUBLIC_IPV6"), True) else "private")
        kind = self.get("HCLOUD_ADDRESS", default).lower()
        if kind not in ("ipv4", "ipv6", "private"):
            permanent(f"HCLOUD_ADDRESS={kind!r}: want ipv4, ipv6 or private")
        return kind

    def machine_name(self, key: str) -> str:
        """The server name for an idempotency key (a valid host name, unique per project)."""
        digest = hashlib.sha256(f"{self.autoscaler_id}\0{self.pool}\0{key}".encode()).hexdigest()[:12]
        slug = re.sub(r"[^a-z0-9]+", "-", key.lower()).strip("-")[:20].strip("-")
        return f"{self.prefix}-{slug}-{digest}" if slug else f"{self.prefix}-{digest}"
