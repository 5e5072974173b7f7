"""Shared fixtures of the cloud provisioner tests (run them with tests/cloud/run).

Fixtures:
    repo                  the repository root (pathlib.Path)
    autoscaler_bin        path of the autoscaler binary ($AUTOSCALER_BIN, else target/debug/autoscaler)
    free_port             a function returning a loopback TCP port nobody listens on
    servers               function-scoped: servers.start(argv, port=..., env=...) runs a background
                          process, waits until it accepts connections and stops it at teardown
    session_servers       the same, kept for the whole session
    provisioner_check     runs `autoscaler provisioner check PATH --env K=V ... [--pool NAME]`
    run_provisioner       runs one provisioner verb the way the autoscaler does (clean environment,
                          request on stdin), answering a Call(code, response, stdout, stderr)
    ssh_public_key        a syntactically valid throwaway ed25519 public key

Nothing here waits by sleeping for a fixed time: readiness is polled against a deadline.
"""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Iterator, Mapping, Sequence

import pytest

REPO = Path(__file__).resolve().parents[2]


def find_free_port() -> int:
    """A loopback port that was free a moment ago (the kernel's pick)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_for_port(port: int, host: str = "127.0.0.1", timeout: float = 30.0,
                  process: subprocess.Popen | None = None) -> None:
    """Poll until host:port accepts a TCP connection; fail at the deadline or if process exits."""
    deadline = time.monotonic() + timeout
    while True:
        if process is not None and process.poll() is not None:
            raise RuntimeError(f"server exited with {process.returncode} before listening on {port}")
        try:
            with socket.create_connection((host, port), timeout=0.5):
                return
        except OSError:
            if time.monotonic() >= deadline:
                raise TimeoutError(f"nothing accepted connections on {host}:{port} within {timeout}s")
            time.sleep(0.05)


@dataclasses.dataclass
class Server:
    process: subprocess.Popen
    port: int
    log_path: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def log(self) -> str:
        with contextlib.suppress(OSError):
            return self.log_path.read_text(errors="replace")
        return ""


class Servers:
    """Background processes, each in its own process group, all stopped by close()."""

    def __init__(self, log_dir: Path) -> None:
        self.log_dir = log_dir
        self.running: list[Server] = []

    def start(self, argv: Sequence[str], port: int, env: Mapping[str, str] | None = None,
              timeout: float = 30.0, cwd: Path | None = None) -> Server:
        """Start argv (which must listen on 127.0.0.1:port) and wait until it accepts connections.
        env is added to the current environment."""
        self.log_dir.mkdir(parents=True, exist_ok=True)
        log_path = self.log_dir / f"server-{port}.log"
        with open(log_path, "wb") as log:
            process = subprocess.Popen(
                list(argv), stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                env={**os.environ, **(env or {})}, cwd=cwd, start_new_session=True,
            )
        server = Server(process, port, log_path)
        self.running.append(server)
        try:
            wait_for_port(port, timeout=timeout, process=process)
        except Exception as error:
            raise RuntimeError(f"{argv[0]} did not start: {error}\n{server.log()}") from None
        return server

    def stop(self, server: Server, grace: float = 5.0) -> None:
        process = server.process
        if process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGTERM)
            try:
                process.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
                process.wait()
        # Anything the server left behind in its group goes too.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, signal.SIGKILL)
        if server in self.running:
            self.running.remove(server)

    def close(self) -> None:
        for server in list(reversed(self.running)):
            self.stop(server)


@dataclasses.dataclass
class Call:
    code: int
    stdout: str
    stderr: str

    @property
    def response(self) -> Any:
        """stdout parsed as the one JSON object the protocol requires (None when it is not)."""
        try:
            return json.loads(self.stdout)
        except ValueError:
            return None


def provisioner_env(env: Mapping[str, str], pool: str) -> dict[str, str]:
    """The environment the autoscaler gives a provisioner: a few variables of its own, the
    protocol's, and the pool's env table."""
    base = {k: os.environ[k] for k in ("PATH", "HOME", "USER", "LANG", "TMPDIR") if k in os.environ}
    return {**base, "AUTOSCALER_PROTOCOL": "1", "AUTOSCALER_POOL": pool,
            "AUTOSCALER_ID": "cloud-tests", **env}


def make_ssh_public_key(comment: str = "cloud-tests") -> str:
    kind = b"ssh-ed25519"
    blob = len(kind).to_bytes(4, "big") + kind + (32).to_bytes(4, "big") + os.urandom(32)
    return f"ssh-ed25519 {base64.b64encode(blob).decode()} {comment}"


# --- fixtures ------------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def repo() -> Path:
    return REPO


@pytest.fixture(scope="session")
def autoscaler_bin() -> Path:
    path = Path(os.environ.get("AUTOSCALER_BIN") or REPO / "target" / "debug" / "autoscaler")
    if not (path.is_file() and os.access(path, os.X_OK)):
        pytest.fail(f"autoscaler binary not found at {path} (build it first, or set AUTOSCALER_BIN)")
    return path


@pytest.fixture(scope="session")
def free_port():
    return find_free_port


@pytest.fixture
def servers(tmp_path: Path) -> Iterator[Servers]:
    pool = Servers(tmp_path / "servers")
    try:
        yield pool
    finally:
        pool.close()


@pytest.fixture(scope="session")
def session_servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Servers]:
    pool = Servers(tmp_path_factory.mktemp("servers"))
    try:
        yield pool
    finally:
        pool.close()


@pytest.fixture(scope="session")
def provisioner_check(autoscaler_bin: Path):
    """provisioner_check(path, env={...}, pool=None, timeout=...) -> CompletedProcess (text)."""

    def check(path: Path | str, env: Mapping[str, str] | None = None, pool: str | None = None,
              timeout: float = 600.0) -> subprocess.CompletedProcess:
        argv = [str(autoscaler_bin), "provisioner", "check", str(path)]
        for key, value in (env or {}).items():
            argv += ["--env", f"{key}={value}"]
        if pool:
            argv += ["--pool", pool]
        return subprocess.run(argv, capture_output=True, text=True, timeout=timeout,
                              stdin=subprocess.DEVNULL, cwd=REPO)

    return check


@pytest.fixture(scope="session")
def run_provisioner():
    """run_provisioner(path, verb, request=None, id=None, env={...}, pool="test") -> Call.

    request defaults to {"protocol": 1, "pool": pool}; dict requests get protocol and pool
    filled in; a str or bytes request is sent as it is."""

    def run(path: Path | str, verb: str, request: Any = None, id: str | None = None,
            env: Mapping[str, str] | None = None, pool: str = "test", timeout: float = 120.0) -> Call:
        if request is None:
            request = {}
        if isinstance(request, dict):
            request = json.dumps({"protocol": 1, "pool": pool, **request})
        if isinstance(request, str):
            request = request.encode()
        argv = [str(path), verb] + ([id] if id is not None else [])
        done = subprocess.run(argv, input=request, capture_output=True, timeout=timeout,
                              env=provisioner_env(env or {}, pool), cwd=Path(path).parent,
                              start_new_session=True)
        return Call(done.returncode, done.stdout.decode(errors="replace"), done.stderr.decode(errors="replace"))

    return run


@pytest.fixture(scope="session")
def ssh_public_key() -> str:
    return make_ssh_public_key()


def pytest_report_header(config: pytest.Config) -> str:
    return f"cloud tests: python {sys.version.split()[0]}, autoscaler {os.environ.get('AUTOSCALER_BIN', '(default)')}"
