"""Constants, the protocol's error and the log line format every module shares."""

from __future__ import annotations

import re
import sys
from typing import Any, NoReturn

NAME = "python-local"
VERSION = "1.0.0"
MAX_BATCH = 10
MARKER = "AUTOSCALER_LOCAL_MACHINE"

READY_WAIT = 5.0  # sshd must answer within this many seconds of starting
TERM_GRACE = 2.0  # processes get this long after SIGTERM before SIGKILL
KILL_WAIT = 3.0  # and this long to disappear after SIGKILL
BIND_ATTEMPTS = 10  # ports tried when another program grabs ours first
LOCK_TIMEOUT = 60.0

EX_ERROR = 1  # the autoscaler retries with backoff
EX_TEMPFAIL = 75  # retry later
EX_CONFIG = 78  # permanent: will fail again if repeated

POOL_RE = re.compile(r"[a-z0-9][a-z0-9_-]{0,62}")
ID_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,254}")
PUBLIC_KEY_RE = re.compile(r"(ssh-ed25519|ssh-rsa|ecdsa-sha2-nistp(256|384|521)) [A-Za-z0-9+/=]+( [^\n]*)?")
SSHD_CANDIDATES = ("/usr/sbin/sshd", "/usr/local/sbin/sshd", "/sbin/sshd")
SFTP_CANDIDATES = (
    "/usr/lib/openssh/sftp-server",
    "/usr/libexec/openssh/sftp-server",
    "/usr/libexec/sftp-server",
    "/usr/lib/ssh/sftp-server",
)


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


def transient(message: str, retry_after: int = 5) -> NoReturn:
    raise ProvisionerError(EX_TEMPFAIL, message, retry_after)


def log(message: str) -> None:
    for line in message.splitlines() or [""]:
        print(f"python-local: {line}", file=sys.stderr, flush=True)
