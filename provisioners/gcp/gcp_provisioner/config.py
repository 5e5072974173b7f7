"""The settings, read from the pool's environment only when a verb needs them (README.md,
"Settings"), and the instance name an idempotency key gives."""

from __future__ import annotations

import hashlib
import re

from .errors import permanent

NAME_RE = re.compile(r"[a-z]([-a-z0-9]{0,61}[a-z0-9])?")
PREFIX_RE = re.compile(r"[a-z][-a-z0-9]{0,28}")
PUBLIC_KEY_RE = re.compile(r"(ssh-ed25519|ssh-rsa|ecdsa-sha2-nistp(256|384|521)) [A-Za-z0-9+/=]+( [^\n]*)?")
USER_RE = re.compile(r"[a-z_][a-z0-9_-]{0,31}")


def truthy(value: str | None, default: bool = False) -> bool:
    if value is None or value.strip() == "":
        return default
    v = value.strip().lower()
    if v in ("1", "true", "yes", "on"):
        return True
    if v in ("0", "false", "no", "off"):
        return False
    permanent(f"{value!r} is not a boolean (true/false)")


class Config:
    def __init__(self, env: dict[str, str]) -> None:
        self.env = env
        self.pool = env.get("AUTOSCALER_POOL") or "default"
        self.autoscaler_id = env.get("AUTOSCALER_ID") or ""
        self.endpoint = env.get("GCE_API_ENDPOINT") or None
        self.anonymous = truthy(env.get("GCE_ANONYMOUS_CREDENTIALS"))
        self.credentials_file = env.get("GCE_CREDENTIALS_FILE") or None
        self.access_token = env.get("GCE_ACCESS_TOKEN") or None
        self.page_size = self._int("GCE_PAGE_SIZE", 500, 1, 500)

    def _int(self, name: str, default: int, low: int, high: int) -> int:
        text = self.env.get(name)
        if text is None or text.strip() == "":
            return default
        try:
            value = int(text)
        except ValueError:
            permanent(f"{name}={text!r} is not a whole number")
        if not low <= value <= high:
            permanent(f"{name}={value} is outside {low}..{high}")
        return value

    def _float(self, name: str, default: float) -> float:
        text = self.env.get(name)
        if text is None or text.strip() == "":
            return default
        try:
            value = float(text)
        except ValueError:
            permanent(f"{name}={text!r} is not a number")
        if value < 0:
            permanent(f"{name} must not be negative")
        return value

    def required(self, name: str) -> str:
        value = (self.env.get(name) or "").strip()
        if not value:
            permanent(f"{name} is not set (see provisioners/gcp/README.md)")
        return value

    @property
    def project(self) -> str:
        return self.required("GCE_PROJECT")

    @property
    def zone(self) -> str:
        zone = self.required("GCE_ZONE")
        if not re.fullmatch(r"[a-z][-a-z0-9]{1,62}", zone):
            permanent(f"GCE_ZONE={zone!r} is not a zone name")
        return zone

    @property
    def prefix(self) -> str:
        prefix = self.env.get("GCE_NAME_PREFIX") or "autoscaler"
        if not PREFIX_RE.fullmatch(prefix):
            permanent(f"GCE_NAME_PREFIX={prefix!r}: want a lowercase letter, then up to 28 of a-z 0-9 -")
        return prefix

    @property
    def ssh_user(self) -> str:
        user = self.env.get("GCE_SSH_USER") or "autoscaler"
        if not USER_RE.fullmatch(user):
            permanent(f"GCE_SSH_USER={user!r} is not a valid login name")
        return user

    @property
    def address_kind(self) -> str:
        kind = (self.env.get("GCE_ADDRESS") or ("external" if self.external_ip else "internal")).lower()
        if kind not in ("external", "internal"):
            permanent(f"GCE_ADDRESS={kind!r}: want external or internal")
        return kind

    @property
    def external_ip(self) -> bool:
        return truthy(self.env.get("GCE_EXTERNAL_IP"), True)

    @property
    def operation_timeout(self) -> float:
        return self._float("GCE_OPERATION_TIMEOUT", 120.0)

    @property
    def poll_interval(self) -> float:
        return self._float("GCE_POLL_INTERVAL", 2.0)

    def machine_name(self, key: str) -> str:
        """The instance name for an idempotency key: the same key (of the same autoscaler and pool)
        always gives the same name."""
        digest = hashlib.sha256(f"{self.autoscaler_id}\0{self.pool}\0{key}".encode()).hexdigest()[:12]
        slug = re.sub(r"[^a-z0-9]+", "-", key.lower()).strip("-")[:20].strip("-")
        return f"{self.prefix}-{slug}-{digest}" if slug else f"{self.prefix}-{digest}"
