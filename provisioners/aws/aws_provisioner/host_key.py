"""The SSH host key cloud-init printed to the console output."""

from __future__ import annotations

import base64
import re

HOST_KEY_PREFERENCE = ["ssh-ed25519", "ecdsa-sha2-nistp256", "ecdsa-sha2-nistp384", "ecdsa-sha2-nistp521", "ssh-rsa"]


def host_key_from_console(output: str) -> str | None:
    """The preferred host key of the last "SSH HOST KEY KEYS" block cloud-init printed, as
    "type base64"; None when there is no such block."""
    begin, end = "-----BEGIN SSH HOST KEY KEYS-----", "-----END SSH HOST KEY KEYS-----"
    start = output.rfind(begin)
    if start < 0:
        return None
    stop = output.find(end, start)
    block = output[start + len(begin): stop if stop >= 0 else len(output)]
    keys: dict[str, str] = {}
    for match in re.finditer(r"(ssh-ed25519|ssh-rsa|ecdsa-sha2-nistp(?:256|384|521)) ([A-Za-z0-9+/]+={0,2})", block):
        kind, blob = match.group(1), match.group(2)
        try:
            raw = base64.b64decode(blob, validate=True)
        except ValueError:
            continue
        # The blob starts with its own type name (a length-prefixed string): check it agrees.
        if len(raw) < 4 or raw[4: 4 + int.from_bytes(raw[:4], "big")] != kind.encode():
            continue
        keys.setdefault(kind, f"{kind} {blob}")
    for kind in HOST_KEY_PREFERENCE:
        if kind in keys:
            return keys[kind]
    return None


def decode_console(output: str) -> str:
    """GetConsoleOutput's Output is base64 on the wire; boto3 leaves it so."""
    if "-----BEGIN SSH HOST KEY KEYS-----" in output:
        return output
    try:
        return base64.b64decode(output, validate=False).decode("utf-8", errors="replace")
    except ValueError:
        return output
