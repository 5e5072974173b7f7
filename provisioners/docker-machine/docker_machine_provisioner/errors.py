"""Exit codes, the protocol error, and log lines with secrets masked."""

from __future__ import annotations

import sys
from typing import Any, NoReturn

EX_ERROR = 1  # the autoscaler retries with backoff
EX_TEMPFAIL = 75  # retry later
EX_CONFIG = 78  # permanent: will fail again if repeated


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


# Values that must never reach a log line: values of driver options whose name says they are
# secret (access keys, tokens, passwords).
SECRETS: list[str] = []


def scrub(text: str) -> str:
    for secret in SECRETS:
        text = text.replace(secret, "***")
    return text


def log(message: str) -> None:
    for line in scrub(message).splitlines() or [""]:
        print(f"docker-machine: {line}", file=sys.stderr, flush=True)
