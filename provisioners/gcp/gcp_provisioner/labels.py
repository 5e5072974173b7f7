"""The autoscaler's labels as GCE labels, which are stricter (README.md, "Labels")."""

from __future__ import annotations

import hashlib
import re


def _squeeze(text: str, limit: int = 63) -> str:
    """At most `limit` characters; a longer text keeps its start and gains a hash of the whole, so
    that two long texts that differ only at the end stay different."""
    if len(text) <= limit:
        return text
    digest = hashlib.sha256(text.encode()).hexdigest()[:8]
    return f"{text[: limit - 9]}-{digest}"


def label_key(key: str) -> str:
    """A GCE label key: starts with a lowercase letter; lowercase letters, digits, _ and -."""
    out = re.sub(r"[^a-z0-9_-]", "_", key.lower())
    if not out or not out[0].isalpha():
        out = "k" + out
    return _squeeze(out)


def label_value(value: str) -> str:
    """A GCE label value: lowercase letters, digits, _ and -, possibly empty."""
    return _squeeze(re.sub(r"[^a-z0-9_-]", "_", value.lower()))


def gce_labels(labels: dict[str, str]) -> dict[str, str]:
    return {label_key(k): label_value(v) for k, v in labels.items()}


def gce_filter(labels: dict[str, str]) -> str:
    """instances.list filter: every label equal; values are plain (sanitised) so need no escaping."""
    terms = [f'(labels.{k} = "{v}")' for k, v in sorted(gce_labels(labels).items())]
    return " AND ".join(terms)
