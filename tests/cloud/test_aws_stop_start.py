"""provisioners/aws: stop and start (the stop_start capability) against moto's EC2 emulator.

The fixtures and helpers are test_aws.py's; where moto cannot show a state (an instance pending
again after a start, EC2 refusing a stop because the instance moved), Ec2Proxy rewrites or
answers the call.
"""

from __future__ import annotations

from test_aws import (  # noqa: F401 (fixtures are found by name)
    ami, aws_env, call, create_request, ec2, instance_of, moto, owner, provisioner, proxy,
)


def running_instance(call, env, ssh_public_key, key: str) -> tuple[str, dict[str, str]]:
    """Creates a machine; returns its instance id and its labels."""
    labels = owner()
    created = call("create", create_request(labels, key, ssh_public_key), env=env)
    assert created.code == 0, created.stderr
    instance_id = created.response["machines"][0]["id"]
    assert call("status", id=instance_id, env=env).response["state"] == "running"
    return instance_id, {**labels, "autoscaler-key": key}


def test_info_declares_stop_start_for_on_demand_pools_only(call):
    for spot, declared in [("off", True), ("spot", False), ("spot-with-fallback", False), ("bogus", False)]:
        result = call("info", env={"AWS_SPOT": spot})
        assert result.code == 0, result.stderr
        assert result.response["capabilities"]["stop_start"] is declared, spot


def test_stop_keeps_the_instance_and_its_labels_and_start_brings_it_back(call, aws_env, ec2, ssh_public_key):
    env = aws_env()
    instance_id, labels = running_instance(call, env, ssh_public_key, "m-stop")

    stopped = call("stop", id=instance_id, env=env)
    assert stopped.code == 0, stopped.stderr
    assert stopped.response["id"] == instance_id and stopped.response["state"] in ("stopping", "stopped")
    assert instance_of(ec2, instance_id)["State"]["Name"] == "stopped"
    status = call("status", id=instance_id, env=env).response
    assert status["state"] == "stopped" and status["labels"] == labels
    assert "address" not in status
    listed = {m["id"]: m for m in call("list", {"labels": owner_of(labels)}, env=env).response["machines"]}
    assert listed[instance_id]["state"] == "stopped" and listed[instance_id]["labels"] == labels

    again = call("stop", id=instance_id, env=env)
    assert again.code == 0 and again.response == {"id": instance_id, "state": "stopped"}

    started = call("start", id=instance_id, env=env)
    assert started.code == 0, started.stderr
    assert started.response["state"] in ("starting", "running")
    status = call("status", id=instance_id, env=env).response
    assert status["state"] == "running" and status["address"] == instance_of(ec2, instance_id)["PublicIpAddress"]
    assert status["labels"] == labels, "the started tag is the provisioner's, not a label"

    again = call("start", id=instance_id, env=env)
    assert again.code == 0 and again.response == {"id": instance_id, "state": "running"}


def owner_of(labels: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in labels.items() if k != "autoscaler-key"}


def test_a_stopped_instance_is_destroyed(call, aws_env, ec2, ssh_public_key):
    env = aws_env()
    instance_id, _ = running_instance(call, env, ssh_public_key, "m-stop-destroy")
    assert call("stop", id=instance_id, env=env).code == 0
    destroyed = call("destroy", id=instance_id, env=env)
    assert destroyed.code == 0 and destroyed.response["state"] in ("stopping", "gone")
    assert instance_of(ec2, instance_id)["State"]["Name"] in ("shutting-down", "terminated")
    assert call("status", id=instance_id, env=env).response["state"] in ("stopping", "gone")


def test_a_restart_pending_is_starting_a_launch_pending_is_creating(call, aws_env, proxy, ssh_public_key):
    env = aws_env(proxy.url)
    instance_id, _ = running_instance(call, env, ssh_public_key, "m-pending")
    pending = lambda body: body.replace(b"<name>running</name>", b"<name>pending</name>")  # noqa: E731
    proxy.rewrite("DescribeInstances", pending)
    assert call("status", id=instance_id, env=env).response["state"] == "creating"
    proxy.rules.clear()

    assert call("stop", id=instance_id, env=env).code == 0
    assert call("start", id=instance_id, env=env).code == 0
    proxy.rewrite("DescribeInstances", pending)
    assert call("status", id=instance_id, env=env).response["state"] == "starting"
    again = call("start", id=instance_id, env=env)
    assert again.code == 0 and again.response == {"id": instance_id, "state": "starting"}


def test_a_spot_instance_cannot_be_stopped(call, aws_env, ec2, proxy, ssh_public_key):
    env = aws_env(proxy.url, AWS_SPOT="spot")
    labels = owner()
    created = call("create", create_request(labels, "m-spot-stop", ssh_public_key), env=env)
    instance_id = created.response["machines"][0]["id"]
    assert instance_of(ec2, instance_id)["InstanceLifecycle"] == "spot"
    refused = call("stop", id=instance_id, env=env)
    assert refused.code == 78
    assert "one-time spot instance" in refused.response["error"]
    assert not proxy.actions("StopInstances")
    assert instance_of(ec2, instance_id)["State"]["Name"] == "running"


def test_power_verbs_in_between_states_are_retry_later(call, aws_env, proxy, ssh_public_key):
    env = aws_env(proxy.url)
    instance_id, _ = running_instance(call, env, ssh_public_key, "m-between")
    refused = call("start", id=instance_id, env=env)
    assert refused.code == 0 and refused.response["state"] == "running"
    proxy.fail("StopInstances", "IncorrectInstanceState",
               f"The instance '{instance_id}' is not in a state from which it can be stopped.", status=400)
    refused = call("stop", id=instance_id, env=env)
    assert refused.code == 75, refused.stderr
    assert refused.response["retry_after"] == 15


def test_unknown_and_foreign_instances(call, aws_env, ec2, ami):
    env = aws_env()
    for verb in ("stop", "start"):
        for unknown in ("i-0123456789abcdef0", "not-an-id"):
            result = call(verb, id=unknown, env=env)
            assert result.code == 0 and result.response == {"id": unknown, "state": "gone"}
    foreign = ec2.run_instances(ImageId=ami, MinCount=1, MaxCount=1)["Instances"][0]["InstanceId"]
    refused = call("stop", id=foreign, env=env)
    assert refused.code == 78 and "not one of ours" in refused.response["error"]
    assert instance_of(ec2, foreign)["State"]["Name"] == "running"
    missing = call("stop", env=env)
    assert missing.code == 78 and "needs a machine id" in missing.response["error"]
