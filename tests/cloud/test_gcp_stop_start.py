"""provisioners/gcp: stop and start (the stop_start capability) against the in-memory Compute
Engine API (stubs/gce.py). Fixtures and helpers are test_gcp.py's."""

from __future__ import annotations

import time

from test_gcp import ZONE, create_request, gce, gcp, settings  # noqa: F401 (fixtures are found by name)

LABELS = {"autoscaler-id": "as-1", "autoscaler-pool": "linux", "autoscaler-key": "m-1"}


def wait_for(call, state: str, within: float = 10.0) -> dict:
    """Polls status (through `call`) until the machine is in `state`, at most `within` seconds."""
    deadline = time.monotonic() + within
    while True:
        status = call("status").response
        if status["state"] == state or time.monotonic() >= deadline:
            assert status["state"] == state, status
            return status
        time.sleep(0.05)


def machine(gce, gcp, run_provisioner, ssh_public_key):
    """Creates a machine and returns `call(verb)` acting on it, once it runs."""
    env = settings(gce)
    created = run_provisioner(gcp, "create", create_request("m-1", LABELS, ssh_public_key), env=env, pool="linux")
    assert created.code == 0, created.stderr
    machine_id = created.response["machines"][0]["id"]

    def call(verb: str):
        return run_provisioner(gcp, verb, {"id": machine_id}, id=machine_id, env=env, pool="linux")

    wait_for(call, "running")
    return machine_id, call


def test_info_declares_stop_start(gcp, run_provisioner):
    info = run_provisioner(gcp, "info", env={})
    assert info.code == 0 and info.response["capabilities"]["stop_start"] is True


def test_stop_keeps_the_instance_and_start_brings_it_back_with_a_new_address(gce, gcp, run_provisioner, ssh_public_key):
    machine_id, call = machine(gce, gcp, run_provisioner, ssh_public_key)
    first_address = call("status").response["address"]

    stopped = call("stop")
    assert stopped.code == 0 and stopped.response == {"id": machine_id, "state": "stopping"}
    status = wait_for(call, "stopped")
    assert status["labels"] == LABELS and "address" not in status
    assert gce.instance(ZONE, machine_id)["status"] == "TERMINATED"
    again = call("stop")
    assert again.code == 0 and again.response == {"id": machine_id, "state": "stopped"}

    started = call("start")
    assert started.code == 0 and started.response == {"id": machine_id, "state": "starting"}
    # PROVISIONING and STAGING after a stop are a restart, not a first boot.
    assert call("status").response["state"] in ("starting", "running")
    assert call("start").response["state"] in ("starting", "running")
    status = wait_for(call, "running")
    assert status["labels"] == LABELS
    assert status["address"] != first_address
    assert status["address"] == gce.instance(ZONE, machine_id)["networkInterfaces"][0]["accessConfigs"][0]["natIP"]
    again = call("start")
    assert again.code == 0 and again.response == {"id": machine_id, "state": "running"}
    base = f"/compute/v1/projects/test-project/zones/{ZONE}/instances/{machine_id}"
    assert len(gce.recorded("POST", f"^{base}/stop$")) == 1
    assert len(gce.recorded("POST", f"^{base}/start$")) == 1


def test_a_stopped_instance_is_destroyed(gce, gcp, run_provisioner, ssh_public_key):
    machine_id, call = machine(gce, gcp, run_provisioner, ssh_public_key)
    call("stop")
    wait_for(call, "stopped")
    destroyed = call("destroy")
    assert destroyed.code == 0 and destroyed.response == {"id": machine_id, "state": "stopping"}
    wait_for(call, "gone")


def test_start_while_stopping_is_retry_later(gce, gcp, run_provisioner, ssh_public_key):
    gce.delete_s = 30.0  # stays STOPPING for this test
    machine_id, call = machine(gce, gcp, run_provisioner, ssh_public_key)
    call("stop")
    refused = call("start")
    assert refused.code == 75, (refused.stdout, refused.stderr)
    assert "STOPPING" in refused.response["error"]
    assert not gce.recorded("POST", "/start$"), "refused before asking GCE"


def test_unknown_ids_are_gone_and_suspended_instances_are_refused(gce, gcp, run_provisioner):
    env = settings(gce)
    for verb in ("stop", "start"):
        for unknown in ("no-such-vm", "Not_A_Name"):
            result = run_provisioner(gcp, verb, {"id": unknown}, id=unknown, env=env)
            assert result.code == 0 and result.response == {"id": unknown, "state": "gone"}
    gce.add_instance(ZONE, {"name": "vm-s", "machineType": f"zones/{ZONE}/machineTypes/e2-medium",
                            "labels": {"autoscaler-pool": "linux"}}, status="SUSPENDED")
    refused = run_provisioner(gcp, "start", {"id": "vm-s"}, id="vm-s", env=env)
    assert refused.code == 78 and "SUSPENDED" in refused.response["error"]
