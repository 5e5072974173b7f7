"""An HTTP proxy in front of moto's EC2 that can answer chosen EC2 API actions itself.

EC2 speaks the Query protocol: every call is a POST of a form (Action=RunInstances&...) and the
answer is XML. The proxy parses the form, records the call, and either forwards it to moto or
answers it with a rule's response: an EC2-shaped error (<Response><Errors><Error>...), a fixed XML
body, or moto's own answer rewritten.
"""

from __future__ import annotations

import dataclasses
import http.client
import http.server
import threading
import urllib.parse
import uuid
from typing import Callable

Params = dict[str, str]


def error_xml(code: str, message: str) -> bytes:
    return (
        '<?xml version="1.0" encoding="UTF-8"?>\n'
        f"<Response><Errors><Error><Code>{code}</Code><Message>{message}</Message></Error></Errors>"
        f"<RequestID>{uuid.uuid4()}</RequestID></Response>"
    ).encode()


@dataclasses.dataclass
class Rule:
    action: str
    when: Callable[[Params], bool]
    status: int = 200
    body: bytes | None = None  # answer this instead of forwarding
    rewrite: Callable[[bytes], bytes] | None = None  # or forward and change moto's answer
    times: int | None = None  # how often the rule applies (None: always)
    hits: int = 0


class Ec2Proxy:
    def __init__(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        self.rules: list[Rule] = []
        self.calls: list[tuple[str, Params]] = []
        self.lock = threading.Lock()
        # RunInstances answers by ClientToken, for emulate_client_token().
        self.token_answers: dict[str, bytes] | None = None
        proxy = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args) -> None:  # keep pytest's output clean
                pass

            def do_POST(self) -> None:
                proxy.handle(self)

            def do_GET(self) -> None:
                proxy.handle(self)

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def port(self) -> int:
        return self.server.server_address[1]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> "Ec2Proxy":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=10)

    # --- rules

    def fail(self, action: str, code: str, message: str, status: int = 503,
             when: Callable[[Params], bool] = lambda p: True, times: int | None = None) -> Rule:
        """Answer action with an EC2 error document."""
        rule = Rule(action, when, status, body=error_xml(code, message), times=times)
        self.rules.append(rule)
        return rule

    def answer(self, action: str, body: str, when: Callable[[Params], bool] = lambda p: True) -> Rule:
        rule = Rule(action, when, 200, body=body.encode())
        self.rules.append(rule)
        return rule

    def rewrite(self, action: str, change: Callable[[bytes], bytes],
                when: Callable[[Params], bool] = lambda p: True) -> Rule:
        rule = Rule(action, when, rewrite=change)
        self.rules.append(rule)
        return rule

    def emulate_client_token(self) -> None:
        """Make RunInstances idempotent by ClientToken, as EC2 is (moto is not)."""
        self.token_answers = {}

    def actions(self, action: str) -> list[Params]:
        with self.lock:
            return [params for name, params in self.calls if name == action]

    # --- serving

    def handle(self, request: http.server.BaseHTTPRequestHandler) -> None:
        length = int(request.headers.get("Content-Length") or 0)
        body = request.rfile.read(length) if length else b""
        query = urllib.parse.urlsplit(request.path).query
        params = dict(urllib.parse.parse_qsl(body.decode("utf-8", "replace") or query, keep_blank_values=True))
        action = params.get("Action", "")
        with self.lock:
            self.calls.append((action, params))
            rule = next((r for r in self.rules if r.action == action and (r.times is None or r.hits < r.times)
                         and r.when(params)), None)
            if rule is not None:
                rule.hits += 1
            token = params.get("ClientToken") if action == "RunInstances" else None
            cached = self.token_answers.get(token) if token and self.token_answers is not None else None
        if rule is not None and rule.body is not None:
            return self.reply(request, rule.status, rule.body)
        if cached is not None:
            return self.reply(request, 200, cached)
        status, headers, answer = self.forward(request, body)
        if rule is not None and rule.rewrite is not None:
            answer = rule.rewrite(answer)
        if token and status == 200 and self.token_answers is not None:
            with self.lock:
                self.token_answers.setdefault(token, answer)
        self.reply(request, status, answer, headers.get("Content-Type", "text/xml"))

    def forward(self, request: http.server.BaseHTTPRequestHandler, body: bytes) -> tuple[int, dict, bytes]:
        connection = http.client.HTTPConnection("127.0.0.1", self.upstream_port, timeout=60)
        try:
            headers = {k: v for k, v in request.headers.items()
                       if k.lower() not in ("connection", "keep-alive", "transfer-encoding", "expect")}
            connection.request(request.command, request.path, body=body, headers=headers)
            response = connection.getresponse()
            return response.status, dict(response.getheaders()), response.read()
        finally:
            connection.close()

    @staticmethod
    def reply(request: http.server.BaseHTTPRequestHandler, status: int, body: bytes,
              content_type: str = "text/xml;charset=UTF-8") -> None:
        request.send_response(status)
        request.send_header("Content-Type", content_type)
        request.send_header("Content-Length", str(len(body)))
        request.end_headers()
        request.wfile.write(body)
