"""Exit codes, the error a verb answers with, and logging to stderr with secrets scrubbed."""

from __future__ import annotations

import os
import sys
from typing import Any, NoReturn

EX_ERROR = 1  # the autoscaler retries with backoff
EX_TEMPFAIL = 75  # retry later
EX_CONFIG = 78  # permanent: will fail again if repeated

# Each message written to stderr is scrubbed of these values.
SECRET_VARIABLES = ("AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_SECURITY_TOKEN")


class ProvisionerError(Exception):
    """A failure answered as {"error": ...} with a protocol exit code."""

    def __init__(self, code: int, message: str, retry_after: int | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.retry_after = retry_after

    def response(self) -> dict[str, Any]:
        body: dict[str, Any] = {"error": self.message}
        if self.retry_after is not None:
            body["retry_after"] = self.retry_after
        return body


def permanent(message: str) -> NoReturn:
    raise ProvisionerError(EX_CONFIG, message)


def scrub(text: str) -> str:
    for variable in SECRET_VARIABLES:
        secret = os.environ.get(variable) or ""
        if len(secret) >= 4:
            text = text.replace(secret, "***")
    return text


def log(message: str) -> None:
    for line in scrub(message).splitlines() or [""]:
        print(f"aws: {line}", file=sys.stderr, flush=True)


def one_line(text: Any) -> str:
    return scrub(" ".join(str(text).split()))
