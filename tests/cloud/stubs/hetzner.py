"""An in-memory stand-in for the Hetzner Cloud API (v1): servers, SSH keys and actions of one
project, enough for what the `hcloud` library sends for the hetzner provisioner.

Modelled:
  - bearer-token authentication (401 `unauthorized` otherwise);
  - POST/GET/DELETE /servers with the real response shapes (server, action, next_actions,
    root_password), label_selector (`k=v`, `k==v`, `k!=v`, `k`, `!k`, `k in (a,b)`,
    `k notin (a,b)`, joined by commas), name filter, and page/per_page pagination with
    meta.pagination;
  - server status over time: initializing -> starting -> running, deleting -> removed;
  - GET /actions/ID, GET/POST /ssh_keys (fingerprint filter, uniqueness by name and fingerprint);
  - validation Hetzner does at create: server name (unique, a host name), server type, image,
    location (invalid_input with field details), SSH key references, label keys and values;
  - error injection through `Stub.inject`, e.g. 429 rate_limit_exceeded or 412
    resource_unavailable, in the API's error shape.
Not modelled: datacenters, networks, firewalls and placement groups as resources, power actions,
rebuilds, volumes, prices, and rate-limit headers beyond what a test injects.
"""

from __future__ import annotations

import base64
import hashlib
import itertools
import re
import time
from datetime import datetime, timezone
from typing import Any

from .httpstub import Request, Stub

HOSTNAME_RE = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9.]{0,61}[A-Za-z0-9])?")
LABEL_VALUE_RE = re.compile(r"(([A-Za-z0-9][-A-Za-z0-9_.]{0,61})?[A-Za-z0-9])?")
LABEL_KEY_RE = re.compile(r"([a-z0-9.-]{1,253}/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?")


def now_text() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S+00:00")


def api_error(code: str, message: str, details: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"error": {"code": code, "message": message, "details": details or {}}}


def fingerprint_of(public_key: str) -> str | None:
    parts = public_key.split()
    if len(parts) < 2:
        return None
    try:
        blob = base64.b64decode(parts[1], validate=True)
    except ValueError:
        return None
    digest = hashlib.md5(blob).hexdigest()  # noqa: S324 - Hetzner's fingerprint format
    return ":".join(digest[i:i + 2] for i in range(0, 32, 2))


SERVER_TYPES = {
    "cx22": {"id": 104, "name": "cx22", "description": "CX22", "cores": 2, "memory": 4.0, "disk": 40},
    "cpx31": {"id": 9, "name": "cpx31", "description": "CPX 31", "cores": 4, "memory": 8.0, "disk": 160},
}
IMAGES = {
    "ubuntu-24.04": {"id": 161547269, "os_flavor": "ubuntu", "os_version": "24.04", "description": "Ubuntu 24.04"},
    "debian-12": {"id": 114690387, "os_flavor": "debian", "os_version": "12", "description": "Debian 12"},
}
LOCATIONS = {
    "fsn1": {"id": 1, "name": "fsn1", "description": "Falkenstein DC Park 1", "country": "DE", "city": "Falkenstein",
             "latitude": 50.47612, "longitude": 12.370071, "network_zone": "eu-central"},
    "hel1": {"id": 3, "name": "hel1", "description": "Helsinki DC Park 1", "country": "FI", "city": "Helsinki",
             "latitude": 60.169855, "longitude": 24.938379, "network_zone": "eu-central"},
}


class HetznerStub(Stub):
    def __init__(self, token: str = "stub-token", initializing_s: float = 0.3, starting_s: float = 0.3,
                 deleting_s: float = 0.4) -> None:
        super().__init__()
        self.token = token
        self.initializing_s = initializing_s
        self.starting_s = starting_s
        self.deleting_s = deleting_s
        self.servers: dict[int, dict[str, Any]] = {}
        self.ssh_keys: dict[int, dict[str, Any]] = {}
        self.actions: dict[int, dict[str, Any]] = {}
        self._ids = itertools.count(5_000_001)

    # -- test helpers --

    def add_server(self, name: str, labels: dict[str, str], status: str = "running") -> dict[str, Any]:
        """A server made by someone else, fixed in `status`."""
        with self.lock:
            record = self._make_server(name, "cx22", "ubuntu-24.04", "fsn1", labels, True, True)
            record["fixed"] = status
            return record["server"]

    def server(self, server_id: int) -> dict[str, Any] | None:
        with self.lock:
            self._tick()
            record = self.servers.get(server_id)
            return record["server"] if record else None

    # -- model --

    def _make_server(self, name: str, server_type: str, image: str, location: str, labels: dict[str, str],
                     ipv4: bool, ipv6: bool) -> dict[str, Any]:
        sid = next(self._ids)
        n = sid % 250 + 2
        loc = LOCATIONS[location]
        server = {
            "id": sid, "name": name, "status": "initializing", "created": now_text(),
            "public_net": {
                "ipv4": {"id": sid + 100_000, "ip": f"198.51.100.{n}", "blocked": False,
                         "dns_ptr": f"static.{n}.100.51.198.clients.your-server.de"} if ipv4 else None,
                "ipv6": {"id": sid + 200_000, "ip": f"2001:db8:{n:x}::/64", "blocked": False, "dns_ptr": []} if ipv6 else None,
                "floating_ips": [], "firewalls": [],
            },
            "private_net": [],
            "server_type": {**SERVER_TYPES[server_type], "deprecated": False, "storage_type": "local",
                            "cpu_type": "shared", "architecture": "x86", "prices": []},
            "datacenter": {"id": loc["id"] * 10, "name": f"{location}-dc1", "description": f"{location} DC 1",
                           "location": loc},
            "location": loc,
            "image": {**IMAGES[image], "name": image, "type": "system", "status": "available", "image_size": None,
                      "disk_size": 5, "created": "2024-04-25T13:26:27+00:00", "created_from": None, "bound_to": None,
                      "rapid_deploy": True, "protection": {"delete": False}, "deprecated": None, "labels": {},
                      "architecture": "x86"},
            "iso": None, "rescue_enabled": False, "locked": False, "backup_window": None,
            "outgoing_traffic": 0, "ingoing_traffic": 0, "included_traffic": 21990232555520,
            "protection": {"delete": False, "rebuild": False}, "labels": dict(labels), "volumes": [],
            "load_balancers": [], "primary_disk_size": SERVER_TYPES[server_type]["disk"], "placement_group": None,
        }
        record = {"server": server, "created": time.monotonic(), "deleting_at": None, "fixed": None}
        self.servers[sid] = record
        return record

    def _action(self, command: str, server_id: int, done_after: float) -> dict[str, Any]:
        aid = next(self._ids)
        action = {"id": aid, "command": command, "status": "running", "progress": 0, "started": now_text(),
                  "finished": None, "resources": [{"id": server_id, "type": "server"}], "error": None}
        self.actions[aid] = {"action": action, "done_at": time.monotonic() + done_after}
        return action

    def _tick(self) -> None:
        now = time.monotonic()
        for sid, record in list(self.servers.items()):
            if record["deleting_at"] is not None:
                if now - record["deleting_at"] >= self.deleting_s:
                    del self.servers[sid]
                else:
                    record["server"]["status"] = "deleting"
                continue
            if record["fixed"]:
                record["server"]["status"] = record["fixed"]
                continue
            age = now - record["created"]
            record["server"]["status"] = ("initializing" if age < self.initializing_s else
                                          "starting" if age < self.initializing_s + self.starting_s else "running")
        for entry in self.actions.values():
            if entry["action"]["status"] == "running" and now >= entry["done_at"]:
                entry["action"].update(status="success", progress=100, finished=now_text())

    # -- HTTP --

    def handle(self, request: Request) -> tuple[int, Any, dict[str, str]]:
        if request.headers.get("authorization") != f"Bearer {self.token}":
            return 401, api_error("unauthorized", "unable to authenticate"), {}
        path = re.sub(r"^/v1", "", request.path)
        with self.lock:
            self._tick()
            if path == "/servers" and request.method == "GET":
                return self._list_servers(request)
            if path == "/servers" and request.method == "POST":
                return self._create_server(request.body or {})
            m = re.fullmatch(r"/servers/([^/]+)", path)
            if m:
                if not m[1].isdigit():
                    return 400, api_error("invalid_input", "invalid input in field 'id'"), {}
                record = self.servers.get(int(m[1]))
                if record is None:
                    return 404, api_error("not_found", f"server with ID '{m[1]}' not found"), {}
                if request.method == "GET":
                    return 200, {"server": record["server"]}, {}
                if request.method == "DELETE":
                    if record["deleting_at"] is None:
                        record["deleting_at"] = time.monotonic()
                        record["server"]["status"] = "deleting"
                    return 200, {"action": self._action("delete_server", record["server"]["id"], self.deleting_s)}, {}
            m = re.fullmatch(r"/actions/(\d+)", path)
            if m and request.method == "GET":
                entry = self.actions.get(int(m[1]))
                if entry is None:
                    return 404, api_error("not_found", f"action with ID '{m[1]}' not found"), {}
                return 200, {"action": entry["action"]}, {}
            if path == "/ssh_keys" and request.method == "GET":
                return self._list_ssh_keys(request)
            if path == "/ssh_keys" and request.method == "POST":
                return self._create_ssh_key(request.body or {})
        return 404, api_error("not_found", f"{request.method} {request.path} not found"), {}

    def _page(self, request: Request, rows: list[dict[str, Any]], key: str) -> tuple[int, Any, dict[str, str]]:
        try:
            page = int(request.arg("page") or 1)
            per_page = int(request.arg("per_page") or 25)
        except ValueError:
            return 400, api_error("invalid_input", "invalid input in fields 'page', 'per_page'"), {}
        per_page = max(1, min(per_page, 50))
        last = max(1, -(-len(rows) // per_page))
        chunk = rows[(page - 1) * per_page: page * per_page]
        meta = {"pagination": {"page": page, "per_page": per_page,
                               "previous_page": page - 1 if page > 1 else None,
                               "next_page": page + 1 if page < last else None,
                               "last_page": last, "total_entries": len(rows)}}
        return 200, {key: chunk, "meta": meta}, {}

    def _list_servers(self, request: Request) -> tuple[int, Any, dict[str, str]]:
        try:
            terms = parse_selector(request.arg("label_selector") or "")
        except ValueError as error:
            return 400, api_error("invalid_input", f"label_selector: {error}"), {}
        name = request.arg("name")
        rows = [r["server"] for _, r in sorted(self.servers.items())
                if selected(r["server"]["labels"], terms) and (name is None or r["server"]["name"] == name)]
        return self._page(request, rows, "servers")

    def _create_server(self, body: dict[str, Any]) -> tuple[int, Any, dict[str, str]]:
        fields: list[dict[str, Any]] = []
        name = body.get("name")
        if not isinstance(name, str) or not HOSTNAME_RE.fullmatch(name):
            fields.append({"name": "name", "messages": ["Name must be a valid hostname."]})
        if body.get("server_type") not in SERVER_TYPES:
            fields.append({"name": "server_type", "messages": ["server type not found"]})
        if body.get("image") not in IMAGES:
            fields.append({"name": "image", "messages": ["image not found"]})
        location = body.get("location") or "fsn1"
        if location not in LOCATIONS:
            fields.append({"name": "location", "messages": ["location not found"]})
        labels = body.get("labels") or {}
        for k, v in labels.items():
            if not LABEL_KEY_RE.fullmatch(k) or not isinstance(v, str) or not LABEL_VALUE_RE.fullmatch(v) or len(v) > 63:
                fields.append({"name": "labels", "messages": [f"label {k!r} is invalid"]})
        for ref in body.get("ssh_keys") or []:
            if not any(ref in (k["id"], k["name"], str(k["id"])) for k in self.ssh_keys.values()):
                fields.append({"name": "ssh_keys", "messages": [f"ssh key {ref!r} not found"]})
        if fields:
            names = ", ".join(f"'{f['name']}'" for f in fields)
            return 400, api_error("invalid_input", f"invalid input in field{'s' if len(fields) > 1 else ''} {names}",
                                  {"fields": fields}), {}
        if any(r["server"]["name"] == name for r in self.servers.values()):
            return 409, api_error("uniqueness_error", "server name is already used",
                                  {"fields": [{"name": "name"}]}), {}
        public_net = body.get("public_net") or {}
        record = self._make_server(name, body["server_type"], body["image"], location, labels,
                                   public_net.get("enable_ipv4", True), public_net.get("enable_ipv6", True))
        record["request"] = body
        server = record["server"]
        action = self._action("create_server", server["id"], self.initializing_s + self.starting_s)
        start = self._action("start_server", server["id"], self.initializing_s + self.starting_s)
        return 201, {"server": server, "action": action, "next_actions": [start],
                     "root_password": None if body.get("ssh_keys") else "YItygq1v3GYjjMomLaKc"}, {}

    def _list_ssh_keys(self, request: Request) -> tuple[int, Any, dict[str, str]]:
        fingerprint = request.arg("fingerprint")
        name = request.arg("name")
        rows = [k for _, k in sorted(self.ssh_keys.items())
                if (fingerprint is None or k["fingerprint"] == fingerprint) and (name is None or k["name"] == name)]
        return self._page(request, rows, "ssh_keys")

    def _create_ssh_key(self, body: dict[str, Any]) -> tuple[int, Any, dict[str, str]]:
        fingerprint = fingerprint_of(str(body.get("public_key") or ""))
        if fingerprint is None or not body.get("name"):
            return 400, api_error("invalid_input", "invalid input in field 'public_key'",
                                  {"fields": [{"name": "public_key", "messages": ["invalid public key"]}]}), {}
        for key in self.ssh_keys.values():
            if key["name"] == body["name"] or key["fingerprint"] == fingerprint:
                return 409, api_error("uniqueness_error", "SSH key with the same fingerprint already exists",
                                      {"fields": [{"name": "public_key"}]}), {}
        kid = next(self._ids)
        key = {"id": kid, "name": body["name"], "fingerprint": fingerprint, "public_key": body["public_key"],
               "labels": body.get("labels") or {}, "created": now_text()}
        self.ssh_keys[kid] = key
        return 201, {"ssh_key": key}, {}


def split_selector(text: str) -> list[str]:
    """Commas separate terms, except inside parentheses."""
    terms, depth, current = [], 0, ""
    for ch in text:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            terms.append(current)
            current = ""
        else:
            current += ch
    terms.append(current)
    return [t.strip() for t in terms if t.strip()]


def parse_selector(text: str) -> list[tuple[str, str, list[str]]]:
    out: list[tuple[str, str, list[str]]] = []
    for term in split_selector(text):
        if m := re.fullmatch(r"([^\s=!,()]+)\s+(in|notin)\s+\(([^)]*)\)", term):
            out.append((m[1], m[2], [v.strip() for v in m[3].split(",")]))
        elif m := re.fullmatch(r"([^\s=!,()]+)\s*(==|=|!=)\s*([^\s=!,()]*)", term):
            out.append((m[1], "!=" if m[2] == "!=" else "=", [m[3]]))
        elif m := re.fullmatch(r"!([^\s=!,()]+)", term):
            out.append((m[1], "absent", []))
        elif re.fullmatch(r"[^\s=!,()]+", term):
            out.append((term, "present", []))
        else:
            raise ValueError(f"cannot parse {term!r}")
    return out


def selected(labels: dict[str, str], terms: list[tuple[str, str, list[str]]]) -> bool:
    for key, op, values in terms:
        value = labels.get(key)
        ok = {"=": value == values[0] if values else False,
              "!=": value != values[0] if values else True,
              "in": value in values, "notin": value not in values,
              "present": value is not None, "absent": value is None}[op]
        if not ok:
            return False
    return True
