"""List filters as Compute Engine takes them, as far as the gcp provisioner sends them:
`(field = "value") AND (field != "value")` over top-level fields and `labels.KEY` (no OR)."""

from __future__ import annotations

import re
from typing import Any

FILTER_TERM_RE = re.compile(r'\(?\s*([A-Za-z][\w.-]*)\s*(=|!=)\s*"([^"]*)"\s*\)?')


def parse_filter(text: str) -> list[tuple[str, str, str]]:
    """`(a = "x") AND (b != "y")` (AND optional between terms) as [(field, op, value)]."""
    terms: list[tuple[str, str, str]] = []
    rest = text.strip()
    while rest:
        m = FILTER_TERM_RE.match(rest)
        if not m:
            raise ValueError(f"cannot parse at {rest[:30]!r}")
        terms.append((m[1], m[2], m[3]))
        rest = rest[m.end():].strip()
        if rest.startswith("AND "):
            rest = rest[4:].strip()
        elif rest.startswith("OR "):
            raise ValueError("OR is not supported by this stub")
    return terms


def matches(resource: dict[str, Any], terms: list[tuple[str, str, str]]) -> bool:
    for field_name, op, value in terms:
        if field_name.startswith("labels."):
            actual = (resource.get("labels") or {}).get(field_name[len("labels."):])
        else:
            actual = resource.get(field_name)
        equal = actual is not None and str(actual) == value
        if (op == "=") != equal:
            return False
    return True
