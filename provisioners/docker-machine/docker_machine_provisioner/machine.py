"""The docker-machine command, and what its failures mean for the autoscaler."""

from __future__ import annotations

import json
import re
import subprocess
from typing import Any

from .config import Config
from .errors import EX_CONFIG, EX_ERROR, EX_TEMPFAIL, ProvisionerError, permanent, scrub

NOT_FOUND_RE = re.compile(r"(Host does not exist|does not exist|not found in the store|machine does not exist)", re.I)

# What docker-machine (or its driver) prints when the cloud says "later" ...
TRANSIENT_RE = re.compile(
    r"RequestLimitExceeded|Throttling|rate ?limit|Rate exceeded|TooManyRequests|\b429\b|"
    r"InsufficientInstanceCapacity|InstanceLimitExceeded|VcpuLimitExceeded|MaxSpotInstanceCountExceeded|"
    r"SpotMaxPriceTooLow|quota|QUOTA_EXCEEDED|RESOURCE_EXHAUSTED|ZONE_RESOURCE_POOL_EXHAUSTED|"
    r"resource_unavailable|resource_limit_exceeded|server_limit_exceeded|capacity|"
    r"ServiceUnavailable|temporarily unavailable|timed? ?out|Timeout",
    re.I,
)
# ... and when it will never work as configured.
PERMANENT_RE = re.compile(
    r"Driver \"[^\"]*\" not found|flag provided but not defined|Incorrect Usage|"
    r"AuthFailure|UnauthorizedOperation|Unauthorized|InvalidClientTokenId|SignatureDoesNotMatch|"
    r"InvalidAMIID|InvalidParameter|invalid_input|InvalidKeyPair|Invalid\w*|"
    r"Error with pre-create check|permission denied|403 Forbidden|\b401\b",
)
CODE_RE = re.compile(
    r"RequestLimitExceeded|Throttling|InsufficientInstanceCapacity|InstanceLimitExceeded|VcpuLimitExceeded|"
    r"QUOTA_EXCEEDED|RESOURCE_EXHAUSTED|ZONE_RESOURCE_POOL_EXHAUSTED|resource_unavailable|rate_limit_exceeded|"
    r"AuthFailure|UnauthorizedOperation|InvalidAMIID\.\w+|InvalidParameter\w*|invalid_input|"
    r"Driver \"[^\"]*\" not found|flag provided but not defined"
)


# --- docker-machine -------------------------------------------------------------------------------


class Machine:
    """docker-machine, run without a shell; its environment is the provisioner's own (the pool's
    env table: MACHINE_STORAGE_PATH, driver credentials, ...)."""

    def __init__(self, config: Config) -> None:
        self.config = config

    def run(self, args: list[str], timeout: float | None = None) -> subprocess.CompletedProcess[str]:
        try:
            return subprocess.run(
                [self.config.binary, *args], stdin=subprocess.DEVNULL, capture_output=True, text=True,
                timeout=timeout, env=self.config.env,
            )
        except subprocess.TimeoutExpired as error:
            raise ProvisionerError(EX_TEMPFAIL, f"docker-machine {args[0]} did not finish within {timeout:.0f} s", 10) from error
        except OSError as error:
            permanent(f"cannot run docker-machine: {error}")

    def status(self, name: str) -> str | None:
        """The machine's docker-machine state, or None when it does not exist."""
        done = self.run(["status", name], timeout=self.config.timeout("DOCKER_MACHINE_STATUS_TIMEOUT", 60))
        if done.returncode != 0:
            if NOT_FOUND_RE.search(done.stderr + done.stdout):
                return None
            raise failure("status", name, done)
        return done.stdout.strip()

    def inspect(self, name: str) -> dict[str, Any]:
        done = self.run(["inspect", name], timeout=60)
        if done.returncode != 0:
            raise failure("inspect", name, done)
        try:
            data = json.loads(done.stdout)
        except ValueError as error:
            raise ProvisionerError(EX_ERROR, f"docker-machine inspect {name}: not JSON") from error
        return data if isinstance(data, dict) else {}

    def ip(self, name: str) -> str | None:
        done = self.run(["ip", name], timeout=60)
        address = done.stdout.strip()
        return address if done.returncode == 0 and address else None

    def ls(self) -> dict[str, str]:
        """name -> state of every machine whose name fits the template."""
        timeout = self.config.timeout("DOCKER_MACHINE_LS_TIMEOUT", 20)
        done = self.run(["ls", "--timeout", str(timeout), "--filter", f"name={self.config.name_regex()}",
                         "--format", "{{.Name}}\t{{.State}}"], timeout=timeout + 40)
        if done.returncode != 0:
            raise failure("ls", "", done)
        machines = {}
        for line in done.stdout.splitlines():
            name, _, state = line.partition("\t")
            if name.strip() and self.config.is_ours(name.strip()):
                machines[name.strip()] = state.strip()
        return machines

    def remove(self, name: str) -> bool:
        """rm -y; True when the machine is gone (or never was)."""
        done = self.run(["rm", "-y", name], timeout=self.config.timeout("DOCKER_MACHINE_RM_TIMEOUT", 240))
        if done.returncode == 0:
            return True
        if NOT_FOUND_RE.search(done.stderr + done.stdout):
            return True
        raise failure("rm", name, done)


def failure(verb: str, name: str, done: subprocess.CompletedProcess[str]) -> ProvisionerError:
    """A failed docker-machine call as a protocol error, named by the cloud's error code when the
    output shows one."""
    text = scrub((done.stderr or "") + "\n" + (done.stdout or ""))
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    errors = [line for line in lines if re.search(r"error|fail|exceeded|invalid|not found|denied", line, re.I)]
    detail = (errors or lines or [f"exit {done.returncode}"])[-1]
    code = CODE_RE.search(text)
    head = f"docker-machine {verb} {name}".rstrip()
    message = f"{head} failed" + (f" ({code[0]})" if code else "") + f": {detail}"
    if PERMANENT_RE.search(text) and not TRANSIENT_RE.search(code[0] if code else ""):
        return ProvisionerError(EX_CONFIG, message[:500])
    if TRANSIENT_RE.search(text):
        return ProvisionerError(EX_TEMPFAIL, message[:500], 60)
    return ProvisionerError(EX_ERROR, message[:500])
