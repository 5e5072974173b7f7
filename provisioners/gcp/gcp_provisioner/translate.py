"""GCE's errors (API errors, credentials errors, failed operations) as protocol errors and exit
codes (README.md, "Errors and exit codes"). Google's exception modules are imported only when an
error is translated."""

from __future__ import annotations

import re
from typing import Any

from .errors import EX_CONFIG, EX_ERROR, EX_TEMPFAIL, ProvisionerError

# Error reasons and codes (HTTP error "reason", ErrorInfo reason, operation error code) that mean
# "try again later": rate limits, quota, and a zone that is out of capacity.
RETRY_REASONS = {
    "ratelimitexceeded", "userratelimitexceeded", "rate_limit_exceeded", "resource_exhausted",
    "quotaexceeded", "quota_exceeded", "zone_resource_pool_exhausted",
    "zone_resource_pool_exhausted_with_details", "resource_pool_exhausted",
    "resourcenotready", "resource_not_ready", "backenderror", "internalerror",
    "resource_operation_rate_exceeded", "operation_rate_exceeded", "unavailable",
}
CAPACITY_REASONS = {
    "zone_resource_pool_exhausted", "zone_resource_pool_exhausted_with_details",
    "resource_pool_exhausted", "quotaexceeded", "quota_exceeded",
}


def _reasons(error: Any) -> list[str]:
    """Every reason/code an API error carries, most specific first."""
    found: list[str] = []
    for item in getattr(error, "errors", None) or ():
        if isinstance(item, dict):
            found.extend(str(item[k]) for k in ("reason", "code") if item.get(k))
    reason = getattr(error, "reason", None)
    if reason:
        found.append(str(reason))
    status = None
    response = getattr(error, "response", None)
    if response is not None:
        try:
            status = (response.json().get("error") or {}).get("status")
        except Exception:  # noqa: BLE001 - the body is only a hint
            status = None
    if status:
        found.append(str(status))
    return found


def _retry_after(error: Any, default: int) -> int:
    response = getattr(error, "response", None)
    value = getattr(response, "headers", {}).get("Retry-After") if response is not None else None
    if value and str(value).strip().isdigit():
        return max(1, int(value))
    return default


def translate(error: Exception, doing: str) -> ProvisionerError:
    """A GoogleAPICallError (or a credentials error) as a protocol error: 75 for rate limits, quota
    and capacity, 78 for what will fail again (auth, permissions, bad image or zone, invalid
    request), 1 for the rest."""
    from google.api_core import exceptions as gexc
    from google.auth import exceptions as auth_exc

    if isinstance(error, ProvisionerError):
        return error
    if isinstance(error, auth_exc.InvalidOperation):
        # Raised when the API answers 401 and the credentials cannot be refreshed: anonymous ones.
        return ProvisionerError(EX_CONFIG, f"{doing}: GCE 401/UNAUTHENTICATED: the API refused the request and the credentials cannot be refreshed ({error})")
    if isinstance(error, auth_exc.DefaultCredentialsError):
        return ProvisionerError(EX_CONFIG, f"{doing}: no Google credentials ({error}); set GCE_CREDENTIALS_FILE or GOOGLE_APPLICATION_CREDENTIALS")
    if isinstance(error, auth_exc.RefreshError):
        return ProvisionerError(EX_CONFIG, f"{doing}: GCE 401/UNAUTHENTICATED: authentication failed, the credentials were refused or cannot be refreshed ({error})")
    if isinstance(error, auth_exc.GoogleAuthError):
        return ProvisionerError(EX_CONFIG, f"{doing}: credentials unusable ({type(error).__name__}: {error})")
    if isinstance(error, gexc.GoogleAPICallError):
        status = getattr(error, "code", None)
        reasons = _reasons(error)
        lowered = {r.lower() for r in reasons}
        label = "/".join(dict.fromkeys([str(status)] + reasons)) if status else "/".join(reasons) or "error"
        text = re.sub(r"^[A-Z]+ https?://\S+: ", "", str(error.message or ""))
        message = f"{doing}: GCE {label}: {text}"
        if status == 429 or lowered & RETRY_REASONS:
            default = 60 if lowered & CAPACITY_REASONS else 15
            return ProvisionerError(EX_TEMPFAIL, message, _retry_after(error, default))
        if status in (500, 502, 503, 504):
            return ProvisionerError(EX_TEMPFAIL, message, _retry_after(error, 15))
        if status in (400, 401, 403, 404, 409, 412):
            return ProvisionerError(EX_CONFIG, message)
        return ProvisionerError(EX_ERROR, message)
    import requests

    if isinstance(error, (requests.exceptions.ConnectionError, requests.exceptions.Timeout)):
        return ProvisionerError(EX_TEMPFAIL, f"{doing}: cannot reach the Compute Engine API ({type(error).__name__})", 15)
    if isinstance(error, gexc.RetryError):
        return ProvisionerError(EX_TEMPFAIL, f"{doing}: {error}", 15)
    return ProvisionerError(EX_ERROR, f"{doing}: {type(error).__name__}: {error}")


def operation_error(operation: Any, doing: str) -> ProvisionerError | None:
    """The error of a finished operation, translated; None when it succeeded."""
    errors = list(getattr(getattr(operation, "error", None), "errors", None) or [])
    if not errors:
        return None
    codes = [e.code for e in errors if e.code]
    text = "; ".join(e.message for e in errors if e.message) or "operation failed"
    lowered = {c.lower() for c in codes}
    label = "/".join(codes) or str(getattr(operation, "http_error_status_code", "") or "error")
    message = f"{doing}: GCE {label}: {text}"
    if lowered & RETRY_REASONS or getattr(operation, "http_error_status_code", 0) == 429:
        return ProvisionerError(EX_TEMPFAIL, message, 60 if lowered & CAPACITY_REASONS else 15)
    http = getattr(operation, "http_error_status_code", 0) or 0
    if 400 <= http < 500:
        return ProvisionerError(EX_CONFIG, message)
    if http >= 500:
        return ProvisionerError(EX_TEMPFAIL, message, 15)
    return ProvisionerError(EX_ERROR, message)


def is_not_found(error: Exception) -> bool:
    from google.api_core import exceptions as gexc

    return isinstance(error, gexc.NotFound)
