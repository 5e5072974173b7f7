"""A small recording HTTP server for the cloud stubs: standard library only.

A stub subclasses `Stub` and implements `handle(request) -> (status, body, headers)`. The server
runs in a daemon thread on 127.0.0.1 and an ephemeral port, records every request it receives
(method, path, query, parsed JSON body, headers) and can be told to answer the next matching
requests with an injected error instead of calling `handle`.
"""

from __future__ import annotations

import json
import re
import socket
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit


@dataclass
class Request:
    method: str
    path: str
    query: dict[str, list[str]]
    body: Any
    headers: dict[str, str]

    def arg(self, name: str, default: str | None = None) -> str | None:
        values = self.query.get(name)
        return values[0] if values else default


@dataclass
class Injection:
    method: str
    path: re.Pattern[str]
    status: int
    body: Any
    headers: dict[str, str] = field(default_factory=dict)
    times: int = 1


class Stub:
    """Base of the cloud stubs: a threaded HTTP server with a request log and error injection."""

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.requests: list[Request] = []
        self.injections: list[Injection] = []
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- to override --

    def handle(self, request: Request) -> tuple[int, Any, dict[str, str]]:
        raise NotImplementedError

    # -- test helpers --

    def inject(self, method: str, path: str, status: int, body: Any, times: int = 1,
               headers: dict[str, str] | None = None) -> None:
        """Answer the next `times` requests whose method matches and whose path matches the regular
        expression `path` (searched) with this status and JSON body."""
        with self.lock:
            self.injections.append(Injection(method.upper(), re.compile(path), status, body, headers or {}, times))

    def clear(self) -> None:
        with self.lock:
            self.requests.clear()
            self.injections.clear()

    def recorded(self, method: str | None = None, path: str | None = None) -> list[Request]:
        """Recorded requests, optionally only those with this method and a path matching `path`."""
        with self.lock:
            return [r for r in self.requests
                    if (method is None or r.method == method.upper())
                    and (path is None or re.search(path, r.path))]

    # -- server --

    @property
    def url(self) -> str:
        assert self._server is not None
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def start(self, deadline: float = 10.0) -> "Stub":
        stub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - quiet
                pass

            def _serve(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                try:
                    body = json.loads(raw) if raw else None
                except ValueError:
                    body = raw.decode(errors="replace")
                parts = urlsplit(self.path)
                request = Request(self.command, parts.path, parse_qs(parts.query, keep_blank_values=True),
                                  body, {k.lower(): v for k, v in self.headers.items()})
                with stub.lock:
                    stub.requests.append(request)
                    injected = stub._take_injection(request)
                if injected is not None:
                    status, payload, headers = injected.status, injected.body, injected.headers
                else:
                    try:
                        status, payload, headers = stub.handle(request)
                    except Exception as error:  # a stub bug: say so loudly
                        status, payload, headers = 500, {"stub_error": f"{type(error).__name__}: {error}"}, {}
                data = b"" if payload is None else json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json; charset=UTF-8")
                self.send_header("Content-Length", str(len(data)))
                for k, v in headers.items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = _serve

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name=type(self).__name__, daemon=True)
        self._thread.start()
        wait_for_port(self._server.server_address[1], deadline)
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def _take_injection(self, request: Request) -> Injection | None:
        for injection in self.injections:
            if injection.method in (request.method, "*") and injection.path.search(request.path):
                injection.times -= 1
                if injection.times <= 0:
                    self.injections.remove(injection)
                return injection
        return None

    def __enter__(self) -> "Stub":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()


def wait_for_port(port: int, deadline: float = 10.0, host: str = "127.0.0.1") -> None:
    """Polls until something accepts TCP connections on the port, or raises after `deadline` s."""
    end = time.monotonic() + deadline
    while True:
        try:
            with socket.create_connection((host, port), timeout=0.5):
                return
        except OSError:
            if time.monotonic() >= end:
                raise TimeoutError(f"nothing listens on {host}:{port} after {deadline} s") from None
            time.sleep(0.02)
