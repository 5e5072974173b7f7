"""The hetzner provisioner against an in-memory Hetzner Cloud API (stubs/hetzner.py): the
conformance kit, the exact requests the hcloud library makes, and how API errors become exit
codes."""

from __future__ import annotations

import json
from typing import Any, Iterator

import pytest

from stubs.hetzner import HetznerStub, api_error, fingerprint_of

TOKEN = "hz-SECRET-token-0123456789abcdefghijklmnopqrstuvwxyz"


@pytest.fixture
def hz() -> Iterator[HetznerStub]:
    stub = HetznerStub(token=TOKEN).start()
    try:
        yield stub
    finally:
        stub.stop()


@pytest.fixture
def hetzner(repo):
    return repo / "provisioners" / "hetzner" / "provisioner"


def settings(stub: HetznerStub, **extra: str) -> dict[str, str]:
    return {"HCLOUD_ENDPOINT": f"{stub.url}/v1", "HCLOUD_TOKEN": TOKEN, "HCLOUD_PAGE_SIZE": "1", **extra}


def create_request(key: str, labels: dict[str, str], public_key: str, user_data: str | None = None) -> dict[str, Any]:
    return {"machines": [{"key": key, "labels": labels}], "ssh_public_key": public_key, "user_data": user_data}


def assert_one_line_error(call, code: int, *words: str) -> dict[str, Any]:
    assert call.code == code, (call.code, call.stdout, call.stderr)
    assert call.stdout.strip().count("\n") == 0
    response = json.loads(call.stdout)
    assert "\n" not in response["error"]
    for word in words:
        assert word in response["error"], response["error"]
    assert TOKEN not in call.stdout and TOKEN not in call.stderr
    return response


def test_hetzner_passes_the_conformance_kit(hz, hetzner, provisioner_check):
    done = provisioner_check(hetzner, env=settings(hz))
    assert done.returncode == 0, done.stdout + done.stderr
    # A stopped Hetzner server is billed in full: no stop_start, so clauses 13-17 are skipped.
    assert "12 passed, 0 failed, 5 skipped" in done.stdout
    assert "does not declare stop_start" in done.stdout
    assert TOKEN not in done.stdout + done.stderr

    [create] = hz.recorded("POST", "^/v1/servers$")
    body = create.body
    labels = body["labels"]
    assert set(labels) == {"autoscaler-id", "autoscaler-pool", "autoscaler-key"}
    assert labels["autoscaler-pool"] == "check"
    assert body["server_type"] == "cx22" and body["image"] == "ubuntu-24.04"
    assert body["name"].startswith("autoscaler-check-")

    # The SSH key was looked up by fingerprint, registered once, and given to the server.
    [key_post] = hz.recorded("POST", "^/v1/ssh_keys$")
    assert key_post.body["public_key"].endswith(" autoscaler-provisioner-check")
    [key_id] = hz.ssh_keys
    assert body["ssh_keys"] == [key_id]
    lookups = hz.recorded("GET", "^/v1/ssh_keys$")
    assert lookups[0].arg("fingerprint") == fingerprint_of(key_post.body["public_key"])

    # Both creates looked the key up first; the second found the server and made nothing.
    selector = (f"autoscaler-id=={labels['autoscaler-id']},autoscaler-key=={labels['autoscaler-key']},"
                "autoscaler-pool==check")
    listed = hz.recorded("GET", "^/v1/servers$")
    assert [r.arg("label_selector") for r in listed[:1]] == [selector]
    assert listed[0].arg("per_page") == "1"
    owner = f"autoscaler-id=={labels['autoscaler-id']},autoscaler-pool==check"
    assert sum(1 for r in listed if r.arg("label_selector") == owner) == 2  # the kit's two lists
    assert all(r.headers["authorization"] == f"Bearer {TOKEN}" for r in hz.requests)
    assert len(hz.recorded("DELETE", "^/v1/servers/")) == 2


def test_create_request_and_idempotency(hz, hetzner, run_provisioner, ssh_public_key):
    labels = {"autoscaler-id": "ci host 1", "autoscaler-pool": "linux", "autoscaler-key": "m-7"}
    env = settings(hz, HCLOUD_LOCATION="hel1", HCLOUD_SERVER_TYPE="cpx31", HCLOUD_IMAGE="debian-12",
                   HCLOUD_PUBLIC_IPV6="false")
    request = create_request("m-7", labels, ssh_public_key, user_data="#cloud-config\nruncmd: [true]\n")
    first = run_provisioner(hetzner, "create", request, env=env, pool="linux")
    assert first.code == 0, first.stderr
    machine = first.response["machines"][0]
    assert machine["key"] == "m-7" and machine["state"] == "creating"

    [create] = hz.recorded("POST", "^/v1/servers$")
    body = create.body
    assert machine["id"] == str(hz.servers[max(hz.servers)]["server"]["id"])
    assert body["location"] == "hel1" and body["server_type"] == "cpx31" and body["image"] == "debian-12"
    assert body["user_data"] == "#cloud-config\nruncmd: [true]\n"
    assert body["public_net"] == {"enable_ipv4": True, "enable_ipv6": False}
    # "ci host 1" is not a valid Hetzner label value: stored encoded, answered decoded.
    assert body["labels"]["autoscaler-id"].startswith("enc.")
    assert body["labels"]["autoscaler-key"] == "m-7"

    again = run_provisioner(hetzner, "create", request, env=env, pool="linux")
    assert again.code == 0 and again.response["machines"][0]["id"] == machine["id"]
    assert len(hz.recorded("POST", "^/v1/servers$")) == 1
    assert len(hz.recorded("POST", "^/v1/ssh_keys$")) == 1  # registered once, by the first create
    lookups = [r.arg("label_selector") for r in hz.recorded("GET", "^/v1/servers$")]
    assert lookups[0] == lookups[1] and "autoscaler-key==m-7" in lookups[0]

    status = run_provisioner(hetzner, "status", {"id": machine["id"]}, id=machine["id"], env=env).response
    assert status["labels"] == labels
    assert status["state"] in ("creating", "running")


def test_an_existing_ssh_key_object_is_reused(hz, hetzner, run_provisioner, ssh_public_key):
    hz.ssh_keys[77] = {"id": 77, "name": "operator key", "fingerprint": fingerprint_of(ssh_public_key),
                       "public_key": ssh_public_key, "labels": {}, "created": "2024-01-01T00:00:00+00:00"}
    call = run_provisioner(hetzner, "create", create_request("k", {}, ssh_public_key), env=settings(hz))
    assert call.code == 0, call.stderr
    assert hz.recorded("POST", "^/v1/servers$")[0].body["ssh_keys"] == [77]
    assert not hz.recorded("POST", "^/v1/ssh_keys$")


def test_list_uses_the_label_selector_and_follows_pages(hz, hetzner, run_provisioner):
    ours = {"autoscaler-id": "as-1", "autoscaler-pool": "linux"}
    for i, status in enumerate(["running", "initializing", "starting", "off", "stopping"]):
        hz.add_server(f"m-{i}", {**ours, "autoscaler-key": f"k{i}"}, status=status)
    hz.add_server("other", {"autoscaler-id": "as-2", "autoscaler-pool": "linux", "autoscaler-key": "x"})
    call = run_provisioner(hetzner, "list", {"labels": ours}, env=settings(hz, HCLOUD_PAGE_SIZE="2"), pool="linux")
    assert call.code == 0, call.stderr
    states = {m["labels"]["autoscaler-key"]: m["state"] for m in call.response["machines"]}
    assert states == {"k0": "running", "k1": "creating", "k2": "creating", "k3": "failed", "k4": "stopping"}
    pages = hz.recorded("GET", "^/v1/servers$")
    assert [p.arg("page") for p in pages] == ["1", "2", "3"]
    assert {p.arg("per_page") for p in pages} == {"2"}
    assert {p.arg("label_selector") for p in pages} == {"autoscaler-id==as-1,autoscaler-pool==linux"}


def test_status_maps_states_and_addresses(hz, hetzner, run_provisioner):
    running = hz.add_server("r", {"autoscaler-pool": "p"}, status="running")
    deleting = hz.add_server("d", {}, status="deleting")
    env = settings(hz, HCLOUD_SSH_USER="admin")
    status = run_provisioner(hetzner, "status", {"id": str(running["id"])}, id=str(running["id"]), env=env).response
    assert status == {"id": str(running["id"]), "state": "running", "labels": {"autoscaler-pool": "p"},
                      "address": running["public_net"]["ipv4"]["ip"], "port": 22, "user": "admin"}
    v6 = run_provisioner(hetzner, "status", {"id": str(running["id"])}, id=str(running["id"]),
                         env=settings(hz, HCLOUD_ADDRESS="ipv6")).response
    assert v6["address"] == running["public_net"]["ipv6"]["ip"].split("/")[0] + "1"
    assert run_provisioner(hetzner, "status", {"id": str(deleting["id"])}, id=str(deleting["id"]),
                           env=env).response["state"] == "stopping"
    assert run_provisioner(hetzner, "status", {"id": "999"}, id="999", env=env).response == {"id": "999", "state": "gone"}
    destroyed = run_provisioner(hetzner, "destroy", {"id": str(running["id"])}, id=str(running["id"]), env=env)
    assert destroyed.response == {"id": str(running["id"]), "state": "stopping"}
    assert hz.recorded("DELETE")[-1].path == f"/v1/servers/{running['id']}"


RETRY_LATER = {
    "rate_limit_exceeded": (429, "limit of 3600 requests per hour reached"),
    "resource_limit_exceeded": (403, "project limit exceeded: servers"),
    "server_limit_exceeded": (403, "server limit reached"),
    "resource_unavailable": (412, "error during placement"),
    "placement_error": (412, "No suitable host found for the server"),
}


@pytest.mark.parametrize("code", list(RETRY_LATER))
def test_limits_and_capacity_exit_75(code, hz, hetzner, run_provisioner, ssh_public_key):
    status, message = RETRY_LATER[code]
    hz.inject("POST", "^/v1/servers$", status, api_error(code, message))
    call = run_provisioner(hetzner, "create", create_request("k", {}, ssh_public_key), env=settings(hz))
    response = assert_one_line_error(call, 75, code, message)
    assert response["retry_after"] > 0
    assert len(hz.recorded("POST", "^/v1/servers$")) == 1  # the library did not repeat it
    assert not hz.servers


@pytest.mark.parametrize("setting,field", [("HCLOUD_IMAGE", "image"), ("HCLOUD_LOCATION", "location"),
                                           ("HCLOUD_SERVER_TYPE", "server_type")])
def test_unknown_image_location_or_type_exits_78(setting, field, hz, hetzner, run_provisioner, ssh_public_key):
    call = run_provisioner(hetzner, "create", create_request("k", {}, ssh_public_key),
                           env=settings(hz, **{setting: "no-such-thing"}))
    assert_one_line_error(call, 78, "invalid_input", field)


def test_a_refused_token_exits_78_and_is_never_printed(hz, hetzner, run_provisioner, ssh_public_key):
    hz.token = "another-token"
    for verb, request, machine_id in [("create", create_request("k", {}, ssh_public_key), None),
                                      ("list", {"labels": {}}, None), ("status", {"id": "12"}, "12"),
                                      ("destroy", {"id": "12"}, "12")]:
        call = run_provisioner(hetzner, verb, request, id=machine_id, env=settings(hz))
        assert_one_line_error(call, 78, "unauthorized")
    missing = run_provisioner(hetzner, "list", {"labels": {}}, env={"HCLOUD_ENDPOINT": f"{hz.url}/v1"})
    assert_one_line_error(missing, 78, "HCLOUD_TOKEN")


def test_an_unreachable_api_exits_75_without_the_token(hetzner, run_provisioner, free_port):
    call = run_provisioner(hetzner, "list", {"labels": {}},
                           env={"HCLOUD_ENDPOINT": f"http://127.0.0.1:{free_port()}/v1", "HCLOUD_TOKEN": TOKEN})
    assert_one_line_error(call, 75, "cannot reach")
