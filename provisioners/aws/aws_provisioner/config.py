"""The settings: the pool's environment variables, each read when a verb first needs it."""

from __future__ import annotations

import re

from .errors import permanent


def flag(env: dict[str, str], name: str, default: bool | None) -> bool | None:
    text = (env.get(name) or "").strip().lower()
    if not text:
        return default
    if text in ("1", "true", "yes", "on"):
        return True
    if text in ("0", "false", "no", "off"):
        return False
    permanent(f"{name} must be true or false, not {text!r}")


def number(env: dict[str, str], name: str, default: int, low: int, high: int) -> int:
    text = (env.get(name) or "").strip()
    if not text:
        return default
    if not text.isdigit() or not low <= int(text) <= high:
        permanent(f"{name} must be a whole number from {low} to {high}, not {text!r}")
    return int(text)


def words(env: dict[str, str], name: str) -> list[str]:
    return [w for w in re.split(r"[,\s]+", env.get(name) or "") if w]


class Config:
    """The settings. Each is read when a verb first needs it, so that (say) a bad AWS_SPOT does
    not stop destroy from working."""

    def __init__(self, env: dict[str, str]) -> None:
        self.env = env
        self.pool = env.get("AUTOSCALER_POOL") or "default"

    # settings every verb that talks to EC2 uses
    @property
    def address(self) -> str:
        value = (self.env.get("AWS_ADDRESS") or "public").strip().lower()
        if value not in ("public", "private"):
            permanent(f"AWS_ADDRESS must be public or private, not {value!r}")
        return value

    @property
    def ssh_user(self) -> str:
        return (self.env.get("AWS_SSH_USER") or "ubuntu").strip()

    @property
    def ssh_port(self) -> int:
        return number(self.env, "AWS_SSH_PORT", 22, 1, 65535)

    @property
    def host_key(self) -> bool:
        return bool(flag(self.env, "AWS_HOST_KEY", True))

    @property
    def page_size(self) -> int:
        return number(self.env, "AWS_PAGE_SIZE", 1000, 5, 1000)

    # settings only create uses
    @property
    def image(self) -> str:
        value = (self.env.get("AWS_AMI_ID") or "").strip()
        if not value:
            permanent("AWS_AMI_ID is not set (the AMI to launch, ami-... or resolve:ssm:...)")
        return value

    @property
    def instance_type(self) -> str:
        return (self.env.get("AWS_INSTANCE_TYPE") or "t3.micro").strip()

    @property
    def spot(self) -> str:
        value = (self.env.get("AWS_SPOT") or "off").strip().lower()
        if value not in ("off", "spot", "spot-with-fallback"):
            permanent(f"AWS_SPOT must be off, spot or spot-with-fallback, not {value!r}")
        return value

    @property
    def extra_tags(self) -> dict[str, str]:
        tags = {}
        for item in (self.env.get("AWS_EXTRA_TAGS") or "").split(","):
            if not item.strip():
                continue
            key, sep, value = item.partition("=")
            if not sep or not key.strip():
                permanent(f"AWS_EXTRA_TAGS must be KEY=VALUE[,KEY=VALUE...], not {item.strip()!r}")
            tags[key.strip()] = value.strip()
        return tags
