"""The docker-machine provisioner against a recording stand-in for the docker-machine command
(stubs/docker-machine): the conformance kit, the exact commands run, and error handling."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

STUB = Path(__file__).resolve().parent / "stubs" / "docker-machine"
SECRET = "wJalrXUtnFEMI-K7MDENG-bPxRfiCYEXAMPLEKEY"
OPTIONS = "\n".join([
    "amazonec2-region=eu-west-1",
    "# a comment, skipped",
    "amazonec2-instance-type=m5.large",
    "",
    f"amazonec2-secret-key={SECRET}",
    "--amazonec2-use-private-address",
])
EXPECTED_FLAGS = ["--amazonec2-region=eu-west-1", "--amazonec2-instance-type=m5.large",
                  f"--amazonec2-secret-key={SECRET}", "--amazonec2-use-private-address"]


@pytest.fixture
def dm(repo):
    return repo / "provisioners" / "docker-machine" / "provisioner"


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    return {
        "DOCKER_MACHINE": str(STUB),
        "DOCKER_MACHINE_DRIVER": "amazonec2",
        "DOCKER_MACHINE_OPTIONS": OPTIONS,
        "MACHINE_STORAGE_PATH": str(tmp_path / "storage"),
        "DOCKER_MACHINE_STATE_DIR": str(tmp_path / "state"),
    }


def calls(env: dict[str, str]) -> list[list[str]]:
    path = Path(env["MACHINE_STORAGE_PATH"]) / "calls.jsonl"
    if not path.exists():
        return []
    return [json.loads(line)["argv"] for line in path.read_text().splitlines()]


def fault(env: dict[str, str], verb: str, stderr: str, exit_code: int = 1) -> None:
    root = Path(env["MACHINE_STORAGE_PATH"])
    root.mkdir(parents=True, exist_ok=True)
    (root / "faults.json").write_text(json.dumps({verb: [{"exit": exit_code, "stderr": stderr}]}))


def create_request(key: str, labels: dict[str, str], public_key: str, user_data: str | None = None) -> dict[str, Any]:
    return {"machines": [{"key": key, "labels": labels}], "ssh_public_key": public_key, "user_data": user_data}


def stub(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(STUB), *args], capture_output=True, text=True,
                          env={"PATH": "/usr/bin:/bin", "MACHINE_STORAGE_PATH": env["MACHINE_STORAGE_PATH"]})


def assert_one_line_error(call, code: int, *words: str) -> dict[str, Any]:
    assert call.code == code, (call.code, call.stdout, call.stderr)
    assert call.stdout.strip().count("\n") == 0
    response = json.loads(call.stdout)
    assert "\n" not in response["error"]
    for word in words:
        assert word in response["error"], response["error"]
    assert SECRET not in call.stdout and SECRET not in call.stderr
    return response


def test_docker_machine_passes_the_conformance_kit(dm, env, provisioner_check):
    done = provisioner_check(dm, env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "17 passed, 0 failed" in done.stdout

    argv = calls(env)
    creates = [a for a in argv if a[0] == "create"]
    # One for clauses 2-8 (the repeated create must find the machine), one for the stop/start
    # clauses.
    assert len(creates) == 2, "the repeated create must find the machine"
    name, power_name = creates[0][-1], creates[1][-1]
    assert name.startswith("autoscaler-check-")
    # The driver and every option reach docker-machine as given, before the machine name.
    assert creates[0] == ["create", "--driver", "amazonec2", *EXPECTED_FLAGS, name]
    # The autoscaler's key was authorised after each create (idempotent append).
    ssh = [a for a in argv if a[0] == "ssh"]
    assert [a[1] for a in ssh] == [name, name, power_name]
    assert all("autoscaler-provisioner-check" in a[2] for a in ssh)
    assert ["ip", name] in argv and ["inspect", name] in argv
    lists = [a for a in argv if a[0] == "ls"]
    assert len(lists) == 3
    assert all("--format" in a and a[a.index("--format") + 1] == "{{.Name}}\t{{.State}}" for a in lists)
    assert all(a[a.index("--filter") + 1] == "name=^autoscaler-[a-z0-9-]+$" for a in lists)
    assert [a for a in argv if a[0] == "rm"] == [["rm", "-y", name]] * 2 + [["rm", "-y", power_name]]
    # Stopped for clauses 13 and 17 (14's stop is a no-op), started once (16's is a no-op).
    assert [a for a in argv if a[0] in ("stop", "start")] == [
        ["stop", power_name], ["start", power_name], ["stop", power_name]]
    # Nothing left behind: not the machine, not its state file.
    assert stub(env, "ls", "-q").stdout.strip() == ""
    assert list(Path(env["DOCKER_MACHINE_STATE_DIR"]).iterdir()) == []


def test_create_status_and_list(dm, env, run_provisioner, ssh_public_key, tmp_path):
    env = {**env, "DM_STUB_SSH_USER": "ec2-user", "DM_STUB_SSH_PORT": "2222"}
    labels = {"autoscaler-id": "as-1", "autoscaler-pool": "linux", "autoscaler-key": "m-1"}
    first = run_provisioner(dm, "create", create_request("m-1", labels, ssh_public_key), env=env, pool="linux")
    assert first.code == 0, first.stderr
    machine = first.response["machines"][0]
    assert machine["state"] == "running"
    name = machine["id"]
    again = run_provisioner(dm, "create", create_request("m-1", labels, ssh_public_key), env=env, pool="linux")
    assert again.response == first.response
    keys = (Path(env["MACHINE_STORAGE_PATH"]) / "machines" / name / "home" / ".ssh" / "authorized_keys").read_text()
    assert keys.splitlines() == [ssh_public_key]  # added once, though create ran twice

    sidecar = json.loads((Path(env["DOCKER_MACHINE_STATE_DIR"]) / f"{name}.json").read_text())
    assert sidecar["labels"] == labels and sidecar["key"] == "m-1" and sidecar["driver"] == "amazonec2"

    status = run_provisioner(dm, "status", {"id": name}, id=name, env=env, pool="linux").response
    inspect = json.loads(stub(env, "inspect", name).stdout)
    assert status == {"id": name, "state": "running", "labels": labels,
                      "address": inspect["Driver"]["IPAddress"], "port": 2222, "user": "ec2-user"}

    # A machine of someone else (not our name template) and one of another pool are not listed.
    assert stub(env, "create", "--driver", "generic", "hand-made").returncode == 0
    other = run_provisioner(dm, "create", create_request("m-2", {**labels, "autoscaler-pool": "win"},
                                                         ssh_public_key), env=env, pool="linux")
    assert other.code == 0
    stub(env, "stop", other.response["machines"][0]["id"])
    listed = run_provisioner(dm, "list", {"labels": {"autoscaler-pool": "linux"}}, env=env, pool="linux").response
    assert listed == {"machines": [{"id": name, "state": "running", "labels": labels}]}
    everything = run_provisioner(dm, "list", {"labels": {}}, env=env, pool="linux").response["machines"]
    assert {m["id"]: m["state"] for m in everything} == {name: "running", other.response["machines"][0]["id"]: "stopped"}
    stopped = run_provisioner(dm, "status", {"id": other.response["machines"][0]["id"]},
                              id=other.response["machines"][0]["id"], env=env).response
    assert stopped["state"] == "stopped" and "Stopped" in stopped["message"]


def test_single_line_options_name_template_and_user_data(dm, env, run_provisioner, ssh_public_key):
    env = {**env, "DOCKER_MACHINE_OPTIONS": "amazonec2-region=eu-west-1 'amazonec2-tags=team,ci runners' --amazonec2-request-spot-instance",
           "DOCKER_MACHINE_NAME": "runner-%s.ci", "DOCKER_MACHINE_USER_DATA_OPTION": "amazonec2-userdata"}
    call = run_provisioner(dm, "create", create_request("Key/7", {}, ssh_public_key, user_data="#!/bin/sh\necho hi\n"),
                           env=env)
    assert call.code == 0, call.stderr
    name = call.response["machines"][0]["id"]
    assert name.startswith("runner-key-7-") and name.endswith(".ci")
    [create] = [a for a in calls(env) if a[0] == "create"]
    user_data = Path(env["DOCKER_MACHINE_STATE_DIR"]) / f"{name}.user-data"
    assert create == ["create", "--driver", "amazonec2", "--amazonec2-region=eu-west-1",
                      "--amazonec2-tags=team,ci runners", "--amazonec2-request-spot-instance",
                      f"--amazonec2-userdata={user_data}", name]
    assert user_data.read_text() == "#!/bin/sh\necho hi\n"
    ls = run_provisioner(dm, "list", {"labels": {}}, env=env).response
    assert [m["id"] for m in ls["machines"]] == [name]
    assert ["ls", "--timeout", "20", "--filter", r"name=^runner-[a-z0-9-]+\.ci$", "--format",
            "{{.Name}}\t{{.State}}"] in calls(env)
    assert run_provisioner(dm, "destroy", {"id": name}, id=name, env=env).response == {"id": name, "state": "gone"}
    assert not user_data.exists()


@pytest.mark.parametrize("stderr,code", [
    ("Error creating machine: Error in driver during machine creation: RequestLimitExceeded: Request limit "
     f"exceeded.\n\tstatus code: 503, request id: 1a2b (secret-key={SECRET})", "RequestLimitExceeded"),
    ("Error creating machine: Error in driver during machine creation: Error launching instance: "
     "InsufficientInstanceCapacity: We currently do not have sufficient m5.large capacity in the Availability "
     "Zone you requested.", "InsufficientInstanceCapacity"),
])
def test_throttling_and_capacity_exit_75(stderr, code, dm, env, run_provisioner, ssh_public_key):
    fault(env, "create", stderr)
    call = run_provisioner(dm, "create", create_request("k", {}, ssh_public_key), env=env)
    response = assert_one_line_error(call, 75, code)
    assert response["retry_after"] > 0
    name = [a for a in calls(env) if a[0] == "create"][0][-1]
    assert ["rm", "-y", name] in calls(env)  # what was half made is removed
    assert list(Path(env["DOCKER_MACHINE_STATE_DIR"]).glob("*.json")) == []


@pytest.mark.parametrize("change,words", [
    ({"DOCKER_MACHINE_DRIVER": "nope"}, ['Driver "nope" not found']),
    ({"DOCKER_MACHINE": "/nonexistent/docker-machine"}, ["docker-machine not found"]),
    ({"DOCKER_MACHINE_DRIVER": ""}, ["DOCKER_MACHINE_DRIVER"]),
    ({"DOCKER_MACHINE_NAME": "no-placeholder"}, ["DOCKER_MACHINE_NAME"]),
    ({"fault": "Error with pre-create check: \"AuthFailure: AWS was not able to validate the provided access "
               "credentials\\n\\tstatus code: 401\""}, ["AuthFailure"]),
])
def test_bad_configuration_exits_78(change, words, dm, env, run_provisioner, ssh_public_key):
    if "fault" in change:
        fault(env, "create", change["fault"])
        change = {}
    call = run_provisioner(dm, "create", create_request("k", {}, ssh_public_key), env={**env, **change})
    assert_one_line_error(call, 78, *words)


def test_a_half_made_machine_is_made_again(dm, env, run_provisioner, ssh_public_key):
    first = run_provisioner(dm, "create", create_request("k", {}, ssh_public_key), env=env)
    name = first.response["machines"][0]["id"]
    stub(env, "stop", name)  # as if the create had been killed half-way
    again = run_provisioner(dm, "create", create_request("k", {}, ssh_public_key), env=env)
    assert again.code == 0 and again.response == first.response
    argv = calls(env)
    assert [a[0] for a in argv if a[0] in ("create", "rm")] == ["create", "rm", "create"]
    assert stub(env, "status", name).stdout.strip() == "Running"


def test_unknown_ids(dm, env, run_provisioner):
    for machine_id in ("autoscaler-nothing-here", "not-ours", "../../etc"):
        assert run_provisioner(dm, "status", {"id": machine_id}, id=machine_id, env=env).response["state"] == "gone"
        assert run_provisioner(dm, "destroy", {"id": machine_id}, id=machine_id, env=env).response["state"] == "gone"


def test_stop_and_start(dm, env, run_provisioner, ssh_public_key):
    labels = {"autoscaler-id": "as-1", "autoscaler-pool": "linux", "autoscaler-key": "m-s"}
    created = run_provisioner(dm, "create", create_request("m-s", labels, ssh_public_key), env=env, pool="linux")
    name = created.response["machines"][0]["id"]

    def call(verb: str):
        return run_provisioner(dm, verb, {"id": name}, id=name, env=env, pool="linux")

    info = run_provisioner(dm, "info", env=env)
    assert info.response["capabilities"]["stop_start"] is True
    assert call("stop").response == {"id": name, "state": "stopped"}
    assert stub(env, "status", name).stdout.strip() == "Stopped"
    status = call("status").response
    assert status["state"] == "stopped" and status["labels"] == labels and "address" not in status
    listed = run_provisioner(dm, "list", {"labels": {"autoscaler-pool": "linux"}}, env=env, pool="linux").response
    assert listed["machines"] == [{"id": name, "state": "stopped", "labels": labels}]
    assert call("stop").response == {"id": name, "state": "stopped"}, "a no-op"

    assert call("start").response == {"id": name, "state": "running"}
    assert call("status").response["state"] == "running"
    assert call("start").response == {"id": name, "state": "running"}, "a no-op"
    assert [a for a in calls(env) if a[0] in ("stop", "start")] == [["stop", name], ["start", name]]

    call("stop")
    assert call("destroy").response == {"id": name, "state": "gone"}
    assert call("status").response["state"] == "gone"


def test_stop_and_start_errors(dm, env, run_provisioner, ssh_public_key):
    created = run_provisioner(dm, "create", create_request("m-e", {}, ssh_public_key), env=env)
    name = created.response["machines"][0]["id"]
    fault(env, "stop", "Error stopping host: RequestLimitExceeded: Request limit exceeded.")
    refused = run_provisioner(dm, "stop", {"id": name}, id=name, env=env)
    assert_one_line_error(refused, 75, "RequestLimitExceeded")
    for verb in ("stop", "start"):
        for machine_id in ("autoscaler-nothing-here", "not-ours"):
            answer = run_provisioner(dm, verb, {"id": machine_id}, id=machine_id, env=env)
            assert answer.code == 0 and answer.response == {"id": machine_id, "state": "gone"}
