"""Exit codes, the protocol error, log lines, and what a Hetzner API error means for the
autoscaler."""

from __future__ import annotations

import sys
from typing import Any, NoReturn

EX_ERROR = 1  # the autoscaler retries with backoff
EX_TEMPFAIL = 75  # retry later
EX_CONFIG = 78  # permanent: will fail again if repeated

# Error codes of the Hetzner Cloud API.
RETRY_CODES = {
    "rate_limit_exceeded": 15, "resource_limit_exceeded": 60, "resource_unavailable": 60,
    "placement_error": 60, "server_limit_exceeded": 60, "conflict": 5, "locked": 10,
    "timeout": 10, "maintenance": 60, "service_error": 15, "unavailable": 15, "robot_unavailable": 30,
    "server_error": 15,
}
PERMANENT_CODES = {
    "unauthorized", "forbidden", "invalid_input", "json_error", "not_found", "token_readonly",
    "protected", "uniqueness_error", "unsupported_error", "server_not_stopped", "invalid_server_type",
    "deprecated_api_endpoint",
}


class ProvisionerError(Exception):
    """A failure answered as {"error": ...} with a protocol exit code."""

    def __init__(self, code: int, message: str, retry_after: int | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = " ".join(message.split())  # one line
        self.retry_after = retry_after

    def response(self) -> dict[str, Any]:
        body: dict[str, Any] = {"error": self.message}
        if self.retry_after is not None:
            body["retry_after"] = self.retry_after
        return body


def permanent(message: str) -> NoReturn:
    raise ProvisionerError(EX_CONFIG, message)


def log(message: str) -> None:
    for line in message.splitlines() or [""]:
        print(f"hetzner: {line}", file=sys.stderr, flush=True)


# --- errors ---------------------------------------------------------------------------------------


def translate(error: Exception, doing: str) -> ProvisionerError:
    from hcloud import APIException

    if isinstance(error, ProvisionerError):
        return error
    if isinstance(error, APIException):
        code = error.code
        text = str(error.message or "")
        details = error.details if isinstance(error.details, dict) else {}
        fields = details.get("fields") if isinstance(details.get("fields"), list) else []
        notes = []
        for f in fields:
            if isinstance(f, dict):
                notes.append(f"{f.get('name')}: {'; '.join(map(str, f.get('messages') or []))}")
        if notes:
            text += f" ({', '.join(notes)})"
        message = f"{doing}: Hetzner {code}: {text}"
        if isinstance(code, str):
            if code in RETRY_CODES:
                return ProvisionerError(EX_TEMPFAIL, message, RETRY_CODES[code])
            if code in PERMANENT_CODES:
                return ProvisionerError(EX_CONFIG, message)
            return ProvisionerError(EX_ERROR, message)
        if code == 429:
            return ProvisionerError(EX_TEMPFAIL, message, 15)
        if code in (500, 502, 503, 504):
            return ProvisionerError(EX_TEMPFAIL, message, 15)
        if code in (401, 403):
            return ProvisionerError(EX_CONFIG, message)
        return ProvisionerError(EX_ERROR, message)
    import requests

    if isinstance(error, requests.exceptions.RequestException):
        # The text names the host and path, never the Authorization header.
        return ProvisionerError(EX_TEMPFAIL, f"{doing}: cannot reach the Hetzner API ({type(error).__name__})", 15)
    return ProvisionerError(EX_ERROR, f"{doing}: {type(error).__name__}: {error}")


def is_not_found(error: Exception) -> bool:
    from hcloud import APIException

    return isinstance(error, APIException) and error.code in ("not_found", 404)
