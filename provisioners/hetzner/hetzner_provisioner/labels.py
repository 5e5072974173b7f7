"""Labels as Hetzner can hold them, and the fingerprint Hetzner shows for an SSH key."""

from __future__ import annotations

import base64
import hashlib
import re

from .errors import permanent

PUBLIC_KEY_RE = re.compile(r"(ssh-ed25519|ssh-rsa|ecdsa-sha2-nistp(256|384|521)) ([A-Za-z0-9+/=]+)( [^\n]*)?")
# Hetzner label rules: values and key names are at most 63 characters, start and end with an
# alphanumeric character and hold only alphanumerics, "-", "_" and "."; a key may have a DNS-like
# prefix followed by "/".
LABEL_VALUE_RE = re.compile(r"(([A-Za-z0-9][-A-Za-z0-9_.]{0,61})?[A-Za-z0-9])?")
LABEL_NAME_RE = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?")
ENCODED = "enc."  # a value stored as base32 of its UTF-8 bytes
HASHED = "sha."  # a value too long to encode: a hash, not reversible


# --- labels ---------------------------------------------------------------------------------------


def encode_value(value: str) -> str:
    """A label value Hetzner accepts. Valid values are stored as they are; others as "enc." and
    the base32 of their bytes (reversible), or, when even that is longer than 63 characters, as
    "sha." and a hash (not reversible)."""
    if LABEL_VALUE_RE.fullmatch(value) and len(value) <= 63 and not value.startswith((ENCODED, HASHED)):
        return value
    encoded = ENCODED + base64.b32encode(value.encode()).decode().rstrip("=").lower()
    if len(encoded) <= 63:
        return encoded
    return HASHED + hashlib.sha256(value.encode()).hexdigest()[:40]


def decode_value(stored: str) -> str:
    if stored.startswith(ENCODED):
        data = stored[len(ENCODED):].upper()
        try:
            return base64.b32decode(data + "=" * (-len(data) % 8)).decode()
        except ValueError:
            return stored
    return stored


def check_label_key(key: str) -> str:
    prefix, _, name = key.rpartition("/")
    if len(key) > 63 + 254 or not LABEL_NAME_RE.fullmatch(name) or (prefix and not re.fullmatch(r"[a-z0-9.-]{1,253}", prefix)):
        permanent(f"label key {key!r} is not allowed by Hetzner (alphanumerics, -, _ and ., at most 63 characters)")
    return key


def hcloud_labels(labels: dict[str, str]) -> dict[str, str]:
    return {check_label_key(k): encode_value(v) for k, v in labels.items()}


def decoded_labels(labels: dict[str, str] | None) -> dict[str, str]:
    return {k: decode_value(v) for k, v in (labels or {}).items()}


def selector(labels: dict[str, str]) -> str:
    """A label_selector requiring every label (values are plain after encoding)."""
    return ",".join(f"{k}=={v}" for k, v in sorted(hcloud_labels(labels).items()))


def md5_fingerprint(public_key: str) -> str:
    """The fingerprint Hetzner shows for an SSH key: MD5 of the key blob, colon-separated hex."""
    match = PUBLIC_KEY_RE.fullmatch(public_key)
    if not match:
        permanent("ssh_public_key must be one OpenSSH public key line")
    try:
        blob = base64.b64decode(match[3], validate=True)
    except ValueError:
        permanent("ssh_public_key is not valid base64")
    digest = hashlib.md5(blob).hexdigest()  # noqa: S324 - the fingerprint format, not security
    return ":".join(digest[i:i + 2] for i in range(0, 32, 2))
