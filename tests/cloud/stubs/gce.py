"""An in-memory stand-in for the Compute Engine v1 REST API: instances and zone operations of one
project, enough for what google-cloud-compute (REST transport) sends for the gcp provisioner.

Modelled:
  - instances.insert / get / list / delete, with the real paths, camelCase JSON and error bodies
    ({"error": {"code", "message", "errors": [{"reason", "domain", "message"}], "status"}});
  - long-running zone operations: insert and delete answer an Operation that is RUNNING and becomes
    DONE later (operations.get / wait / list), with `error.errors[].code` when it failed;
  - instance status over time: PROVISIONING -> STAGING -> RUNNING, and STOPPING -> removed after a
    delete (delays configurable);
  - instances.stop (STOPPING -> TERMINATED, keeping the instance, lastStopTimestamp set) and
    instances.start (TERMINATED -> PROVISIONING -> STAGING -> RUNNING again, with a new ephemeral
    external IP, as GCE gives one); start while STOPPING is refused (400 resourceNotReady);
  - list filters of the form `(field = "value") AND (field != "value")` over top-level fields and
    `labels.KEY`, and pagination by maxResults / pageToken / nextPageToken;
  - validation GCE does at insert: instance name, label keys and values, metadata keys, known zone,
    machine type and source image, duplicate names (409 alreadyExists);
  - an optional bearer token (401 without it), spot preemption (`preempt`), and a failure for the
    next insert operation (`fail_next_insert`) such as ZONE_RESOURCE_POOL_EXHAUSTED.
Not modelled: regions, disks and networks as resources, OR in filters, IAM, requestId dedup,
guest attributes, serial ports, and every field GCE computes that the provisioner does not read.
"""

from __future__ import annotations

import base64
import itertools
import re
import secrets
import time
from datetime import datetime, timezone
from typing import Any

from .gce_filter import matches, parse_filter
from .httpstub import Request, Stub

BASE = "https://www.googleapis.com/compute/v1"
NAME_RE = re.compile(r"[a-z]([-a-z0-9]{0,61}[a-z0-9])?")
LABEL_KEY_RE = re.compile(r"[a-z][a-z0-9_-]{0,62}")
LABEL_VALUE_RE = re.compile(r"[a-z0-9_-]{0,63}")
META_KEY_RE = re.compile(r"[a-zA-Z0-9_-]{1,128}")


def now_text() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")


def api_error(code: int, message: str, reason: str, domain: str = "global", status: str | None = None,
              details: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    error: dict[str, Any] = {"code": code, "message": message,
                             "errors": [{"message": message, "domain": domain, "reason": reason}]}
    if status:
        error["status"] = status
    if details:
        error["details"] = details
    return {"error": error}


class GceStub(Stub):
    def __init__(self, project: str = "test-project", zones: tuple[str, ...] = ("europe-west1-b", "us-central1-a"),
                 provisioning_s: float = 0.3, staging_s: float = 0.3, delete_s: float = 0.4) -> None:
        super().__init__()
        self.project = project
        self.zones = set(zones)
        self.images = {
            "projects/debian-cloud/global/images/family/debian-12",
            "projects/ubuntu-os-cloud/global/images/family/ubuntu-2404-lts-amd64",
        }
        self.machine_types = {"e2-standard-2", "e2-medium", "n2-standard-4"}
        self.provisioning_s = provisioning_s
        self.staging_s = staging_s
        self.delete_s = delete_s
        self.require_token: str | None = None
        # Whether a project other than `project` exists (and is not ours: 403), or not (404).
        self.other_projects_exist = True
        self.instances: dict[tuple[str, str], dict[str, Any]] = {}
        self.operations: dict[tuple[str, str], dict[str, Any]] = {}
        self._next_insert_failure: tuple[str, str, int] | None = None
        self._ids = itertools.count(4_000_000_000_000_000_001)

    # -- test helpers --

    def fail_next_insert(self, code: str, message: str, http_status: int = 503) -> None:
        """The next insert is accepted (200, an Operation) but its operation ends DONE with this
        error, and no instance is made: how GCE reports a zone out of capacity or quota."""
        with self.lock:
            self._next_insert_failure = (code, message, http_status)

    def add_instance(self, zone: str, resource: dict[str, Any], status: str = "RUNNING") -> dict[str, Any]:
        """An instance made by someone else (for list tests), already in `status`."""
        with self.lock:
            record = self._make_instance(zone, resource)
            record["fixed"] = status
            self.instances[(zone, resource["name"])] = record
            return record["resource"]

    def preempt(self, zone: str, name: str) -> None:
        """GCE reclaims a spot instance: it stops, and is deleted or left TERMINATED according to
        its instanceTerminationAction; a compute.instances.preempted operation is recorded."""
        with self.lock:
            record = self.instances[(zone, name)]
            action = record["resource"].get("scheduling", {}).get("instanceTerminationAction", "STOP")
            record["stopping_at"] = time.monotonic()
            record["after_stop"] = "delete" if action == "DELETE" else "TERMINATED"
            record["resource"]["statusMessage"] = "Instance was preempted."
            self._operation(zone, "compute.instances.preempted", record["resource"], done=True,
                            status_message="Instance was preempted.", user="system")

    def instance(self, zone: str, name: str) -> dict[str, Any] | None:
        with self.lock:
            self._tick()
            record = self.instances.get((zone, name))
            return record["resource"] if record else None

    # -- model --

    def _zone_url(self, zone: str) -> str:
        return f"{BASE}/projects/{self.project}/zones/{zone}"

    def _make_instance(self, zone: str, body: dict[str, Any]) -> dict[str, Any]:
        resource = dict(body)
        iid = str(next(self._ids))
        n = len(self.instances) + 1
        resource.update(
            kind="compute#instance", id=iid, creationTimestamp=now_text(),
            zone=self._zone_url(zone), selfLink=f"{self._zone_url(zone)}/instances/{body['name']}",
            status="PROVISIONING", labelFingerprint=base64.b64encode(secrets.token_bytes(8)).decode(),
            cpuPlatform="Unknown CPU Platform", startRestricted=False, deletionProtection=False,
            fingerprint=base64.b64encode(secrets.token_bytes(8)).decode(),
        )
        mt = str(body.get("machineType", "")).rsplit("/", 1)[-1]
        resource["machineType"] = f"{self._zone_url(zone)}/machineTypes/{mt}"
        metadata = dict(body.get("metadata") or {})
        metadata.update(kind="compute#metadata", fingerprint=base64.b64encode(secrets.token_bytes(8)).decode())
        resource["metadata"] = metadata
        nics = []
        for i, nic in enumerate(body.get("networkInterfaces") or [{}]):
            nic = dict(nic)
            nic.update(kind="compute#networkInterface", name=f"nic{i}", networkIP=f"10.132.0.{n % 250 + 2}",
                       network=f"{BASE}/projects/{self.project}/{nic.get('network', 'global/networks/default')}",
                       stackType="IPV4_ONLY", fingerprint="AAAAAAAAAAA=")
            configs = []
            for access in nic.get("accessConfigs") or []:
                access = dict(access)
                access.update(kind="compute#accessConfig", natIP=f"203.0.113.{n % 250 + 2}", networkTier="PREMIUM")
                configs.append(access)
            if configs:
                nic["accessConfigs"] = configs
            nics.append(nic)
        resource["networkInterfaces"] = nics
        disks = []
        for i, disk in enumerate(body.get("disks") or []):
            disk = {k: v for k, v in disk.items() if k != "initializeParams"}
            disk.update(kind="compute#attachedDisk", index=i, deviceName=f"persistent-disk-{i}",
                        source=f"{self._zone_url(zone)}/disks/{body['name']}", mode="READ_WRITE",
                        interface="SCSI", diskSizeGb=str((body["disks"][i].get("initializeParams") or {}).get("diskSizeGb", "10")))
            disks.append(disk)
        resource["disks"] = disks
        scheduling = {"onHostMaintenance": "MIGRATE", "automaticRestart": True, "preemptible": False,
                      "provisioningModel": "STANDARD"}
        scheduling.update(body.get("scheduling") or {})
        if scheduling.get("provisioningModel") == "SPOT":
            scheduling["preemptible"] = True
        resource["scheduling"] = scheduling
        # "created" is when the instance last began to boot: its insert, or its latest start.
        return {"resource": resource, "zone": zone, "created": time.monotonic(), "fixed": None,
                "stopping_at": None, "after_stop": None, "starts": 0}

    def _status_of(self, record: dict[str, Any], now: float) -> str | None:
        """The instance's status now; None once it no longer exists."""
        if record["stopping_at"] is not None:
            if now - record["stopping_at"] < self.delete_s:
                return "STOPPING"
            return None if record["after_stop"] == "delete" else "TERMINATED"
        if record["fixed"]:
            return record["fixed"]
        age = now - record["created"]
        if age < self.provisioning_s:
            return "PROVISIONING"
        if age < self.provisioning_s + self.staging_s:
            return "STAGING"
        return "RUNNING"

    def _tick(self) -> None:
        now = time.monotonic()
        for key, record in list(self.instances.items()):
            status = self._status_of(record, now)
            if status is None:
                del self.instances[key]
            else:
                if status == "RUNNING" and record["resource"]["status"] != "RUNNING":
                    record["resource"]["lastStartTimestamp"] = now_text()
                record["resource"]["status"] = status
        for op in self.operations.values():
            if op["resource"]["status"] != "DONE" and now >= op["done_at"]:
                op["resource"].update(status="DONE", progress=100, endTime=now_text())
                if op["failure"]:
                    code, message, http = op["failure"]
                    op["resource"]["error"] = {"errors": [{"code": code, "message": message}]}
                    op["resource"]["httpErrorStatusCode"] = http
                    op["resource"]["httpErrorMessage"] = {503: "SERVICE UNAVAILABLE", 403: "FORBIDDEN",
                                                          400: "BAD REQUEST", 429: "TOO MANY REQUESTS"}.get(http, "ERROR")

    def _operation(self, zone: str, kind: str, target: dict[str, Any], done: bool = False, after: float = 0.0,
                   failure: tuple[str, str, int] | None = None, status_message: str | None = None,
                   user: str = "tests@example.invalid") -> dict[str, Any]:
        name = f"operation-{int(time.time() * 1000)}-{secrets.token_hex(6)}-{secrets.token_hex(4)}"
        resource = {
            "kind": "compute#operation", "id": str(next(self._ids)), "name": name,
            "zone": self._zone_url(zone), "operationType": kind,
            "targetLink": f"{self._zone_url(zone)}/instances/{target['name']}",
            "targetId": str(target.get("id") or next(self._ids)),
            "status": "DONE" if done else "RUNNING", "user": user, "progress": 100 if done else 0,
            "insertTime": now_text(), "startTime": now_text(),
            "selfLink": f"{self._zone_url(zone)}/operations/{name}",
        }
        if status_message:
            resource["statusMessage"] = status_message
        if done:
            resource["endTime"] = now_text()
        self.operations[(zone, name)] = {"resource": resource, "done_at": time.monotonic() + after,
                                         "failure": failure}
        return resource

    # -- HTTP --

    def handle(self, request: Request) -> tuple[int, Any, dict[str, str]]:
        if self.require_token is not None and request.headers.get("authorization") != f"Bearer {self.require_token}":
            return 401, api_error(401, "Request is missing required authentication credential. Expected OAuth 2 "
                                  "access token, login cookie or other valid authentication credential.",
                                  "required", status="UNAUTHENTICATED"), {"WWW-Authenticate": 'Bearer realm="https://accounts.google.com/"'}
        m = re.fullmatch(r"/compute/v1/projects/([^/]+)/zones/([^/]+)/(instances|operations)(?:/([^/]+))?"
                         r"(/wait|/stop|/start)?", request.path)
        if not m:
            return 404, api_error(404, f"The requested URL {request.path} was not found on this server.", "notFound"), {}
        project, zone, collection, name, action = m.groups()
        wait = action == "/wait"
        if project != self.project and not self.other_projects_exist:
            return 404, api_error(404, f"The resource 'projects/{project}' was not found", "notFound"), {}
        if project != self.project:
            return 403, api_error(403, f"Permission denied on resource project {project}.", "forbidden",
                                  status="PERMISSION_DENIED"), {}
        if zone not in self.zones:
            return 404, api_error(404, f"The resource 'projects/{project}/zones/{zone}' was not found", "notFound"), {}
        with self.lock:
            self._tick()
            if collection == "instances":
                if request.method == "POST" and name is None:
                    return self._insert(zone, request.body or {})
                if request.method == "GET" and name is None:
                    return self._list(zone, request, self.instances, lambda r: r["zone"] == zone)
                if request.method == "GET":
                    return self._get_instance(zone, name)
                if request.method == "DELETE" and name is not None:
                    return self._delete(zone, name)
                if request.method == "POST" and action == "/stop":
                    return self._stop(zone, name)
                if request.method == "POST" and action == "/start":
                    return self._start(zone, name)
            else:
                if request.method == "GET" and name is None:
                    return self._list(zone, request, self.operations, lambda r: r["resource"]["zone"].endswith(f"/{zone}"),
                                      kind="compute#operationList")
                if name is not None and (request.method == "GET" or (request.method == "POST" and wait)):
                    return self._get_operation(zone, name, wait=bool(wait))
        return 405, api_error(405, "Method not allowed", "methodNotAllowed"), {}

    def _not_found(self, zone: str, name: str, what: str = "instances") -> tuple[int, Any, dict[str, str]]:
        message = f"The resource 'projects/{self.project}/zones/{zone}/{what}/{name}' was not found"
        return 404, api_error(404, message, "notFound"), {}

    def _invalid(self, message: str) -> tuple[int, Any, dict[str, str]]:
        return 400, api_error(400, message, "invalid"), {}

    def _insert(self, zone: str, body: dict[str, Any]) -> tuple[int, Any, dict[str, str]]:
        name = body.get("name", "")
        if not isinstance(name, str) or not NAME_RE.fullmatch(name):
            return self._invalid(f"Invalid value for field 'resource.name': '{name}'. Must be a match of regex "
                                 "'(?:[a-z](?:[-a-z0-9]{0,61}[a-z0-9])?)'")
        labels = body.get("labels") or {}
        if len(labels) > 64:
            return self._invalid("Invalid value for field 'resource.labels': too many labels (at most 64).")
        for k, v in labels.items():
            if not LABEL_KEY_RE.fullmatch(k) or not isinstance(v, str) or not LABEL_VALUE_RE.fullmatch(v):
                return self._invalid(f"Invalid value for field 'resource.labels': '{k}'. Label keys and values "
                                     "can only contain lowercase letters, numeric characters, underscores and dashes.")
        for item in (body.get("metadata") or {}).get("items") or []:
            if not META_KEY_RE.fullmatch(str(item.get("key", ""))):
                return self._invalid(f"Invalid value for field 'resource.metadata': metadata key "
                                     f"'{item.get('key')}' is not valid.")
        mt = str(body.get("machineType", "")).rsplit("/", 1)[-1]
        if mt not in self.machine_types:
            return self._invalid(f"Invalid value for field 'resource.machineType': '{body.get('machineType')}'. "
                                 f"Machine type with name '{mt}' does not exist in zone '{zone}'.")
        for i, disk in enumerate(body.get("disks") or []):
            image = (disk.get("initializeParams") or {}).get("sourceImage")
            if image and image.split("compute/v1/", 1)[-1] not in self.images:
                return self._invalid(f"Invalid value for field 'resource.disks[{i}].initializeParams.sourceImage': "
                                     f"'{image}'. The referenced image resource cannot be found.")
        if (zone, name) in self.instances:
            message = f"The resource 'projects/{self.project}/zones/{zone}/instances/{name}' already exists"
            return 409, api_error(409, message, "alreadyExists"), {}
        failure, self._next_insert_failure = self._next_insert_failure, None
        if failure is not None:
            op = self._operation(zone, "insert", {"name": name}, after=0.2, failure=failure)
            return 200, op, {}
        record = self._make_instance(zone, body)
        self.instances[(zone, name)] = record
        op = self._operation(zone, "insert", record["resource"], after=self.provisioning_s + self.staging_s)
        return 200, op, {}

    def _get_instance(self, zone: str, name: str) -> tuple[int, Any, dict[str, str]]:
        record = self.instances.get((zone, name))
        if record is None:
            return self._not_found(zone, name)
        return 200, record["resource"], {}

    def _delete(self, zone: str, name: str) -> tuple[int, Any, dict[str, str]]:
        record = self.instances.get((zone, name))
        if record is None:
            return self._not_found(zone, name)
        if record["stopping_at"] is None or record["after_stop"] != "delete":
            record["stopping_at"] = time.monotonic()
            record["after_stop"] = "delete"
            record["resource"]["status"] = "STOPPING"
        op = self._operation(zone, "delete", record["resource"], after=self.delete_s)
        return 200, op, {}

    def _stop(self, zone: str, name: str) -> tuple[int, Any, dict[str, str]]:
        record = self.instances.get((zone, name))
        if record is None:
            return self._not_found(zone, name)
        if record["stopping_at"] is None:
            record["stopping_at"] = time.monotonic()
            record["after_stop"] = "TERMINATED"
            record["resource"]["status"] = "STOPPING"
            record["resource"]["lastStopTimestamp"] = now_text()
        op = self._operation(zone, "stop", record["resource"], after=self.delete_s)
        return 200, op, {}

    def _start(self, zone: str, name: str) -> tuple[int, Any, dict[str, str]]:
        record = self.instances.get((zone, name))
        if record is None:
            return self._not_found(zone, name)
        status = record["resource"]["status"]
        if status == "STOPPING":
            message = f"The resource 'projects/{self.project}/zones/{zone}/instances/{name}' is not ready"
            return 400, api_error(400, message, "resourceNotReady"), {}
        if status == "TERMINATED":
            record.update(created=time.monotonic(), stopping_at=None, after_stop=None, fixed=None)
            record["starts"] += 1
            record["resource"]["status"] = "PROVISIONING"
            n = len(self.instances) + 10 * record["starts"]
            for nic in record["resource"]["networkInterfaces"]:
                for access in nic.get("accessConfigs") or []:
                    access["natIP"] = f"198.51.100.{n % 250 + 2}"
        op = self._operation(zone, "start", record["resource"], after=self.provisioning_s + self.staging_s)
        return 200, op, {}

    def _get_operation(self, zone: str, name: str, wait: bool) -> tuple[int, Any, dict[str, str]]:
        op = self.operations.get((zone, name))
        if op is None:
            return self._not_found(zone, name, "operations")
        if wait:
            # operations.wait returns when DONE or after its own deadline (2 minutes at GCE, 2 s here).
            end = time.monotonic() + 2.0
            while op["resource"]["status"] != "DONE" and time.monotonic() < end:
                self.lock.release()
                try:
                    time.sleep(0.02)
                finally:
                    self.lock.acquire()
                self._tick()
        return 200, op["resource"], {}

    def _list(self, zone: str, request: Request, table: dict[Any, dict[str, Any]], keep: Any,
              kind: str = "compute#instanceList") -> tuple[int, Any, dict[str, str]]:
        try:
            terms = parse_filter(request.arg("filter") or "")
        except ValueError as error:
            return self._invalid(f"Invalid list filter expression '{request.arg('filter')}': {error}")
        try:
            size = int(request.arg("maxResults") or 500)
            offset = int(base64.urlsafe_b64decode((request.arg("pageToken") or "") + "==").decode() or 0)
        except ValueError:
            return self._invalid("Invalid value for maxResults or pageToken")
        size = max(1, min(size, 500))
        rows = sorted((r["resource"] for r in table.values() if keep(r) and matches(r["resource"], terms)),
                      key=lambda r: (r.get("name", ""), r.get("id", "")))
        page = rows[offset: offset + size]
        body: dict[str, Any] = {"kind": kind, "id": f"projects/{self.project}/zones/{zone}",
                                "selfLink": f"{self._zone_url(zone)}/{'instances' if 'instance' in kind else 'operations'}"}
        if page:
            body["items"] = page
        if offset + size < len(rows):
            body["nextPageToken"] = base64.urlsafe_b64encode(str(offset + size).encode()).decode().rstrip("=")
        return 200, body, {}
