"""The gcp provisioner against an in-memory Compute Engine API (stubs/gce.py): the conformance kit,
the exact requests google-cloud-compute makes, and how API errors become exit codes."""

from __future__ import annotations

import json
import re
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Iterator

import pytest

from stubs.gce import GceStub, api_error

ZONE = "europe-west1-b"
LABEL_RE = re.compile(r"[a-z][a-z0-9_-]{0,62}")
VALUE_RE = re.compile(r"[a-z0-9_-]{0,63}")


@pytest.fixture
def gce() -> Iterator[GceStub]:
    stub = GceStub(project="test-project").start()
    try:
        yield stub
    finally:
        stub.stop()


@pytest.fixture
def gcp(repo):
    return repo / "provisioners" / "gcp" / "provisioner"


def settings(stub: GceStub, **extra: str) -> dict[str, str]:
    return {
        "GCE_API_ENDPOINT": stub.url,
        "GCE_ANONYMOUS_CREDENTIALS": "true",
        "GCE_PROJECT": stub.project,
        "GCE_ZONE": ZONE,
        "GCE_PAGE_SIZE": "1",
        "GCE_POLL_INTERVAL": "0.1",
        **extra,
    }


def create_request(key: str, labels: dict[str, str], public_key: str, user_data: str | None = None) -> dict[str, Any]:
    return {"machines": [{"key": key, "labels": labels}], "ssh_public_key": public_key, "user_data": user_data}


def metadata(body: dict[str, Any]) -> dict[str, str]:
    return {item["key"]: item["value"] for item in body["metadata"]["items"]}


def assert_one_line_error(call, code: int, *words: str) -> dict[str, Any]:
    assert call.code == code, (call.code, call.stdout, call.stderr)
    response = json.loads(call.stdout)
    assert call.stdout.strip().count("\n") == 0
    assert "\n" not in response["error"]
    for word in words:
        assert word in response["error"], response["error"]
    return response


def test_gcp_passes_the_conformance_kit(gce, gcp, provisioner_check):
    done = provisioner_check(gcp, env=settings(gce))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "17 passed, 0 failed" in done.stdout

    base = f"/compute/v1/projects/test-project/zones/{ZONE}"
    inserts = gce.recorded("POST", f"^{base}/instances$")
    # The second machine is the stop/start clauses' own.
    assert len(inserts) == 2, "the repeated create must find the instance, not insert again"
    body, power_body = inserts[0].body, inserts[1].body
    meta = metadata(body)
    labels = json.loads(meta["autoscaler-labels"])
    assert set(labels) == {"autoscaler-id", "autoscaler-pool", "autoscaler-key"}
    assert labels["autoscaler-pool"] == "check"
    # GCE labels: the request's labels (already valid here) plus the key.
    assert body["labels"] == labels
    assert meta["autoscaler-idempotency-key"] == labels["autoscaler-key"]
    assert re.fullmatch(r"autoscaler:ssh-ed25519 [A-Za-z0-9+/=]+ autoscaler-provisioner-check", meta["ssh-keys"])
    assert body["name"].startswith("autoscaler-check-")
    assert body["machineType"] == f"zones/{ZONE}/machineTypes/e2-standard-2"
    assert body["disks"][0]["initializeParams"]["sourceImage"] == "projects/debian-cloud/global/images/family/debian-12"
    assert body["networkInterfaces"][0]["accessConfigs"][0]["type"] == "ONE_TO_ONE_NAT"

    # Each insert's long-running operation was polled on its own endpoint until DONE (stop and
    # start do not wait for theirs).
    polls = gce.recorded("GET", f"^{base}/operations/operation-")
    assert polls and len({p.path for p in polls}) == len(inserts)

    # list filtered on the owner labels, one page at a time: twice for the first machine, once
    # for the stopped one.
    lists = gce.recorded("GET", f"^{base}/instances$")
    assert len(lists) == 3
    for call, machine in zip(lists, [body, body, power_body]):
        assert call.arg("maxResults") == "1"
        assert call.arg("filter") == (f'(labels.autoscaler-id = "{machine["labels"]["autoscaler-id"]}") AND '
                                      '(labels.autoscaler-pool = "check")')

    deletes = gce.recorded("DELETE", f"^{base}/instances/")
    assert [d.path for d in deletes] == [f"{base}/instances/{body['name']}"] * 2 + [
        f"{base}/instances/{power_body['name']}"]
    # Stopped twice (clauses 13 and 17; the no-op stop of clause 14 asks GCE nothing), started once.
    assert len(gce.recorded("POST", f"^{base}/instances/{power_body['name']}/stop$")) == 2
    assert len(gce.recorded("POST", f"^{base}/instances/{power_body['name']}/start$")) == 1


def test_create_carries_labels_key_ssh_key_user_data_and_spot(gce, gcp, run_provisioner, ssh_public_key):
    labels = {"autoscaler-id": "Build.Host-7", "autoscaler-pool": "linux", "autoscaler-key": "m-000017",
              "Team Name": "Ops/Infra " + "x" * 80}
    env = settings(gce, GCE_SPOT="true", GCE_SSH_USER="runner", GCE_NETWORK_TAGS="ci, runners")
    request = create_request("m-000017", labels, ssh_public_key, user_data="#cloud-config\npackages: [git]\n")
    first = run_provisioner(gcp, "create", request, env=env, pool="linux")
    assert first.code == 0, first.stderr
    machine = first.response["machines"][0]
    assert machine["key"] == "m-000017" and machine["state"] in ("creating", "running")

    [insert] = gce.recorded("POST", "/instances$")
    body = insert.body
    assert body["name"] == machine["id"]
    # Every label key and value is one GCE accepts, and the originals are kept in metadata.
    for k, v in body["labels"].items():
        assert LABEL_RE.fullmatch(k) and VALUE_RE.fullmatch(v), (k, v)
    assert body["labels"]["autoscaler-id"] == "build_host-7"
    assert body["labels"]["autoscaler-key"] == "m-000017"
    assert body["labels"]["team_name"].startswith("ops_infra_xxx") and len(body["labels"]["team_name"]) == 63
    meta = metadata(body)
    assert json.loads(meta["autoscaler-labels"]) == labels
    assert meta["ssh-keys"] == f"runner:{ssh_public_key}"
    assert meta["user-data"] == "#cloud-config\npackages: [git]\n"
    assert meta["enable-oslogin"] == "FALSE"
    assert body["scheduling"] == {"provisioningModel": "SPOT", "instanceTerminationAction": "DELETE",
                                  "automaticRestart": False, "onHostMaintenance": "TERMINATE"}
    assert body["tags"] == {"items": ["ci", "runners"]}

    # The same key again: answered from a GET, no second insert.
    again = run_provisioner(gcp, "create", request, env=env, pool="linux")
    assert again.code == 0 and again.response["machines"][0]["id"] == machine["id"]
    assert len(gce.recorded("POST", "/instances$")) == 1

    status = run_provisioner(gcp, "status", {"id": machine["id"]}, id=machine["id"], env=env, pool="linux").response
    assert status["state"] == "running"
    assert status["labels"] == labels  # the exact labels, not the sanitised ones
    assert status["address"] == gce.instance(ZONE, machine["id"])["networkInterfaces"][0]["accessConfigs"][0]["natIP"]
    assert status["user"] == "runner" and status["port"] == 22


def test_list_uses_the_label_filter_and_follows_page_tokens(gce, gcp, run_provisioner):
    def add(name: str, labels: dict[str, str], status: str = "RUNNING") -> None:
        sanitized = {k: re.sub(r"[^a-z0-9_-]", "_", v.lower()) for k, v in labels.items()}
        gce.add_instance(ZONE, {
            "name": name, "machineType": f"zones/{ZONE}/machineTypes/e2-medium", "labels": sanitized,
            "metadata": {"items": [{"key": "autoscaler-labels", "value": json.dumps(labels)}]},
            "networkInterfaces": [{"accessConfigs": [{"type": "ONE_TO_ONE_NAT"}]}],
        }, status=status)

    ours = {"autoscaler-id": "As.1", "autoscaler-pool": "linux"}
    add("m-a", {**ours, "autoscaler-key": "a"})
    add("m-b", {**ours, "autoscaler-key": "b"}, status="STAGING")
    add("m-c", {**ours, "autoscaler-key": "c"}, status="STOPPING")
    add("m-d", {**ours, "autoscaler-key": "d"}, status="TERMINATED")
    add("m-e", {**ours, "autoscaler-key": "e"}, status="PROVISIONING")
    add("other-pool", {"autoscaler-id": "As.1", "autoscaler-pool": "windows", "autoscaler-key": "f"})
    # Same sanitised labels ("as_1"), different real ones: the exact comparison drops it.
    add("look-alike", {"autoscaler-id": "as_1", "autoscaler-pool": "linux", "autoscaler-key": "g"})

    call = run_provisioner(gcp, "list", {"labels": ours}, env=settings(gce, GCE_PAGE_SIZE="2"), pool="linux")
    assert call.code == 0, call.stderr
    got = {m["id"]: m["state"] for m in call.response["machines"]}
    assert got == {"m-a": "running", "m-b": "creating", "m-c": "stopping", "m-d": "stopped", "m-e": "creating"}
    assert all(m["labels"]["autoscaler-id"] == "As.1" for m in call.response["machines"])

    pages = gce.recorded("GET", "/instances$")
    assert len(pages) == 3  # 6 matching the filter, 2 per page
    assert pages[0].arg("pageToken") is None
    for page in pages:
        assert page.arg("filter") == '(labels.autoscaler-id = "as_1") AND (labels.autoscaler-pool = "linux")'
        assert page.arg("maxResults") == "2"
    assert len({p.arg("pageToken") for p in pages[1:]}) == 2


def test_preempted_spot_instance_reports_an_interruption(gce, gcp, run_provisioner):
    labels = {"autoscaler-id": "as-1", "autoscaler-pool": "linux", "autoscaler-key": "s1"}
    gce.add_instance(ZONE, {
        "name": "spot-1", "machineType": f"zones/{ZONE}/machineTypes/e2-medium", "labels": labels,
        "metadata": {"items": [{"key": "autoscaler-labels", "value": json.dumps(labels)}]},
        "scheduling": {"provisioningModel": "SPOT", "instanceTerminationAction": "STOP"},
    })
    gce.add_instance(ZONE, {"name": "spot-2", "machineType": f"zones/{ZONE}/machineTypes/e2-medium",
                            "labels": {**labels, "autoscaler-key": "s2"},
                            "scheduling": {"provisioningModel": "SPOT"}})
    gce.preempt(ZONE, "spot-1")
    env = settings(gce, GCE_PAGE_SIZE="10")

    status = run_provisioner(gcp, "status", {"id": "spot-1"}, id="spot-1", env=env, pool="linux").response
    assert status["state"] in ("stopping", "stopped")  # STOPPING, then TERMINATED
    assert status["interruption"] == {"reason": "spot_reclaim", "deadline": None}
    assert "preempted" in status["message"]
    ops = gce.recorded("GET", "/operations$")
    assert ops and 'operationType = "compute.instances.preempted"' in ops[-1].arg("filter")

    listed = run_provisioner(gcp, "list", {"labels": {"autoscaler-pool": "linux"}}, env=env, pool="linux").response
    by_id = {m["id"]: m for m in listed["machines"]}
    assert by_id["spot-1"]["interruption"] == {"reason": "spot_reclaim", "deadline": None}
    assert "interruption" not in by_id["spot-2"]


def test_status_and_destroy_of_unknown_or_deleting_instances(gce, gcp, run_provisioner):
    gce.delete_s = 30.0  # stays STOPPING for this test
    labels = {"autoscaler-pool": "linux"}
    gce.add_instance(ZONE, {"name": "vm-1", "machineType": f"zones/{ZONE}/machineTypes/e2-medium", "labels": labels})
    env = settings(gce)
    first = run_provisioner(gcp, "destroy", {"id": "vm-1"}, id="vm-1", env=env).response
    assert first == {"id": "vm-1", "state": "stopping"}
    status = run_provisioner(gcp, "status", {"id": "vm-1"}, id="vm-1", env=env).response
    assert status["state"] == "stopping"
    # An id GCE could never have made is gone without asking it.
    before = len(gce.requests)
    assert run_provisioner(gcp, "status", {"id": "Not_A_Name"}, id="Not_A_Name", env=env).response["state"] == "gone"
    assert len(gce.requests) == before


def test_a_404_about_the_zone_or_the_project_is_no_proof_that_the_instance_is_gone(gce, gcp, run_provisioner):
    """With GCE_ZONE or GCE_PROJECT wrong, GCE's 404 is about the zone or the project; the client
    library's message still starts with the request URL, which names the instance. `status` and
    `destroy` must fail (78) rather than answer `gone` for an instance that runs and bills."""
    gce.other_projects_exist = False
    gce.add_instance(ZONE, {"name": "vm-1", "machineType": f"zones/{ZONE}/machineTypes/e2-medium",
                            "labels": {"autoscaler-pool": "linux"}})
    wrong = {"zone": settings(gce, GCE_ZONE="europe-west9-z"),
             "project": settings(gce, GCE_PROJECT="no-such-project")}
    for what, env in wrong.items():
        for verb in ("status", "destroy"):
            call = run_provisioner(gcp, verb, {"id": "vm-1"}, id="vm-1", env=env)
            response = assert_one_line_error(call, 78, "404")
            assert "gone" not in call.stdout, (what, verb, response)
    assert (ZONE, "vm-1") in gce.instances
    # The control: the same instance asked for in the right place is running, and a name that
    # is not there is gone.
    env = settings(gce)
    assert run_provisioner(gcp, "status", {"id": "vm-1"}, id="vm-1", env=env).response["state"] in ("running", "creating")
    assert run_provisioner(gcp, "status", {"id": "vm-2"}, id="vm-2", env=env).response == {"id": "vm-2", "state": "gone"}
    assert run_provisioner(gcp, "destroy", {"id": "vm-2"}, id="vm-2", env=env).response == {"id": "vm-2", "state": "gone"}


def each_case(cases: dict[str, Any], run: Any) -> None:
    """Runs run(name, case) for every case at once (each provisioner call spends most of its time
    importing the client library), then re-raises the first failure, naming its case."""
    with ThreadPoolExecutor(max_workers=4) as pool:
        futures = {name: pool.submit(run, name, case) for name, case in cases.items()}
    for name, future in futures.items():
        try:
            future.result()
        except AssertionError as error:
            raise AssertionError(f"case {name}: {error}") from error


RETRY_LATER = {
    "http-429-rate-limit": ("inject", 429, api_error(
        429, "Quota exceeded for quota metric 'Queries' and limit 'Queries per minute' of service "
        "'compute.googleapis.com'", "rateLimitExceeded", "usageLimits", "RESOURCE_EXHAUSTED"), "rateLimitExceeded"),
    "http-403-quota": ("inject", 403, api_error(
        403, "Quota 'CPUS' exceeded.  Limit: 24.0 in region europe-west1.", "quotaExceeded", "usageLimits"),
        "quotaExceeded"),
    "operation-zone-exhausted": ("operation", "ZONE_RESOURCE_POOL_EXHAUSTED",
                                 "The zone 'projects/test-project/zones/europe-west1-b' does not have enough resources "
                                 "available to fulfill the request.  Try a different zone, or try again later.",
                                 "ZONE_RESOURCE_POOL_EXHAUSTED"),
    "operation-quota": ("operation", "QUOTA_EXCEEDED", "Quota 'SSD_TOTAL_GB' exceeded.  Limit: 500.0 in region "
                        "europe-west1.", "QUOTA_EXCEEDED"),
}


def test_rate_limits_quota_and_capacity_exit_75(gcp, run_provisioner, ssh_public_key):
    def run(name: str, case: tuple[Any, ...]) -> None:
        kind, a, b, code = case
        with GceStub(project="test-project") as stub:
            if kind == "inject":
                stub.inject("POST", "/instances$", a, b, headers={"Retry-After": "7"} if a == 429 else None)
            else:
                stub.fail_next_insert(a, b, http_status=403 if "QUOTA" in a else 503)
            call = run_provisioner(gcp, "create", create_request("k1", {"autoscaler-pool": "test"}, ssh_public_key),
                                   env=settings(stub))
            response = assert_one_line_error(call, 75, code)
            assert isinstance(response["retry_after"], int) and response["retry_after"] > 0
            if a == 429:
                assert response["retry_after"] == 7  # the API's Retry-After
            assert not stub.instances  # nothing was made
            assert len(stub.recorded("POST", "/instances$")) == 1  # and nothing repeated

    each_case(RETRY_LATER, run)


PERMANENT = {
    "unknown-image": ({"GCE_IMAGE": "projects/debian-cloud/global/images/family/debian-99"}, None, "invalid"),
    "unknown-machine-type": ({"GCE_MACHINE_TYPE": "e9-giant"}, None, "invalid"),
    "unknown-zone": ({"GCE_ZONE": "europe-west9-z"}, None, "notFound"),
    "permission-denied": ({}, (403, api_error(403, "Required 'compute.instances.create' permission for "
                                              "'projects/test-project/zones/europe-west1-b/instances/x'",
                                              "forbidden", status="PERMISSION_DENIED")), "forbidden"),
    "bad-request": ({}, (400, api_error(400, "Invalid value for field 'resource.networkInterfaces[0].network'",
                                        "invalid")), "invalid"),
}


def test_bad_configuration_exits_78(gcp, run_provisioner, ssh_public_key):
    def run(name: str, case: tuple[Any, ...]) -> None:
        extra, injected, code = case
        with GceStub(project="test-project") as stub:
            if injected:
                stub.inject("POST", "/instances$", *injected)
            call = run_provisioner(gcp, "create", create_request("k1", {}, ssh_public_key), env=settings(stub, **extra))
            assert_one_line_error(call, 78, code)

    each_case(PERMANENT, run)


def test_refused_credentials_exit_78_and_the_token_is_never_printed(gce, gcp, run_provisioner, ssh_public_key):
    gce.require_token = "ya29.the-right-one"
    secret = "ya29.WRONG-token-do-not-print-0123456789"
    wrong = settings(gce, GCE_ANONYMOUS_CREDENTIALS="", GCE_ACCESS_TOKEN=secret)
    right = settings(gce, GCE_ANONYMOUS_CREDENTIALS="", GCE_ACCESS_TOKEN="ya29.the-right-one")
    calls = {
        "create": lambda: run_provisioner(gcp, "create", create_request("k1", {}, ssh_public_key), env=wrong),
        "list": lambda: run_provisioner(gcp, "list", {"labels": {}}, env=wrong),
        "right token": lambda: run_provisioner(gcp, "status", {"id": "vm-1"}, id="vm-1", env=right),
    }
    with ThreadPoolExecutor(max_workers=3) as pool:
        done = {name: pool.submit(fn) for name, fn in calls.items()}
    for name in ("create", "list"):
        call = done[name].result()
        assert_one_line_error(call, 78, "401")
        assert secret not in call.stderr and secret not in call.stdout
    ok = done["right token"].result()
    assert ok.code == 0 and ok.response == {"id": "vm-1", "state": "gone"}
    sent = {r.headers.get("authorization") for r in gce.recorded()}
    assert sent == {f"Bearer {secret}", "Bearer ya29.the-right-one"}


def test_missing_settings_exit_78_and_an_unreachable_api_75(gcp, run_provisioner, free_port):
    call = run_provisioner(gcp, "list", {"labels": {}}, env={"GCE_ANONYMOUS_CREDENTIALS": "true"})
    assert_one_line_error(call, 78, "GCE_PROJECT")
    unreachable = {"GCE_API_ENDPOINT": f"http://127.0.0.1:{free_port()}", "GCE_ANONYMOUS_CREDENTIALS": "true",
                   "GCE_PROJECT": "p", "GCE_ZONE": ZONE}
    call = run_provisioner(gcp, "list", {"labels": {}}, env=unreachable)
    assert assert_one_line_error(call, 75, "cannot reach")["retry_after"] > 0
    info = run_provisioner(gcp, "info", {})
    assert info.code == 0 and info.response["name"] == "gcp"


def test_operation_polling_gives_up_at_its_budget(gce, gcp, run_provisioner, ssh_public_key):
    gce.provisioning_s = 60.0  # the insert operation stays RUNNING
    started = time.monotonic()
    call = run_provisioner(gcp, "create", create_request("slow", {}, ssh_public_key),
                           env=settings(gce, GCE_OPERATION_TIMEOUT="1"))
    assert call.code == 0 and call.response["machines"][0]["state"] == "creating"
    assert time.monotonic() - started < 20
