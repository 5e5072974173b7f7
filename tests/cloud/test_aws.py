"""provisioners/aws against moto's EC2 emulator (moto_server on a loopback port).

Where moto cannot produce an answer (throttling, capacity errors, spot reclaim notices, console
output with host keys, ClientToken idempotency), aws_proxy.Ec2Proxy sits between the provisioner
and moto and answers those calls itself in EC2's wire format.
"""

from __future__ import annotations

import base64
import email
import gzip
import sys
import uuid
from pathlib import Path

import boto3
import pytest

from aws_proxy import Ec2Proxy

REGION = "us-east-1"
ACCESS_KEY = "AKIAMOTOCLOUDTESTS01"
# Distinctive, so that finding it anywhere in the provisioner's output is unambiguous.
SECRET_KEY = "s3cr3t-Kx9QpZ7wLm2vRt8nYb4cJd6fHg1aSe5uW0"


@pytest.fixture(scope="module")
def provisioner(repo: Path) -> Path:
    return repo / "provisioners" / "aws" / "provisioner"


@pytest.fixture(scope="module")
def moto(session_servers, free_port):
    """moto's server, validating AMI ids so that an unknown AMI fails as on EC2."""
    port = free_port()
    return session_servers.start(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)], port,
        env={"MOTO_ENABLE_AMI_VALIDATION": "true"},
    )


@pytest.fixture(scope="module")
def ec2(moto):
    """A boto3 client straight to moto, to look behind the provisioner's back."""
    return boto3.client("ec2", endpoint_url=moto.url, region_name=REGION,
                        aws_access_key_id=ACCESS_KEY, aws_secret_access_key=SECRET_KEY)


@pytest.fixture(scope="module")
def ami(ec2) -> str:
    images = ec2.describe_images(Owners=["amazon"])["Images"]
    linux = [i for i in images if "windows" not in (i.get("Name") or "").lower()] or images
    return linux[0]["ImageId"]


@pytest.fixture
def proxy(moto):
    with Ec2Proxy(moto.port) as p:
        yield p


@pytest.fixture
def aws_env(moto, ami, tmp_path):
    """aws_env(endpoint=None, **settings): the pool env table for a test."""

    def make(endpoint: str | None = None, **settings: str) -> dict[str, str]:
        return {
            "AWS_ENDPOINT_URL": endpoint or moto.url,
            "AWS_ACCESS_KEY_ID": ACCESS_KEY,
            "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
            "AWS_REGION": REGION,
            "AWS_CONFIG_FILE": str(tmp_path / "no-aws-config"),
            "AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "no-aws-credentials"),
            "AWS_EC2_METADATA_DISABLED": "true",
            "AWS_AMI_ID": ami,
            **settings,
        }

    return make


@pytest.fixture
def call(run_provisioner, provisioner):
    """call(verb, request=None, id=None, env=...) -> Call, checking on every call that the
    secret key shows up neither on stdout nor on stderr, and that stdout is one JSON object."""

    def run(verb, request=None, id=None, env=None, pool="aws"):
        result = run_provisioner(provisioner, verb, request, id=id, env=env, pool=pool)
        assert SECRET_KEY not in result.stderr
        assert SECRET_KEY not in result.stdout
        assert "Traceback" not in result.stdout
        assert isinstance(result.response, dict), f"stdout is not one JSON object: {result.stdout!r}"
        return result

    return run


def owner() -> dict[str, str]:
    return {"autoscaler-id": f"as-{uuid.uuid4().hex[:8]}", "autoscaler-pool": "aws"}


def create_request(labels: dict[str, str], key: str, public_key: str, user_data=None) -> dict:
    return {"machines": [{"key": key, "labels": {**labels, "autoscaler-key": key}}],
            "ssh_public_key": public_key, "user_data": user_data}


def instance_of(ec2, instance_id: str) -> dict:
    return ec2.describe_instances(InstanceIds=[instance_id])["Reservations"][0]["Instances"][0]


# --- the conformance kit -------------------------------------------------------------------------


@pytest.mark.parametrize("spot", ["off", "spot-with-fallback"])
def test_provisioner_check_passes(provisioner_check, provisioner, aws_env, spot):
    result = provisioner_check(provisioner, env=aws_env(AWS_SPOT=spot), pool="aws")
    report = result.stdout + result.stderr
    assert result.returncode == 0, report
    # Only an on-demand pool declares stop_start, so only there do clauses 13-17 run.
    expected = "17 passed, 0 failed" if spot == "off" else "12 passed, 0 failed, 5 skipped"
    assert expected in report, report
    assert SECRET_KEY not in report


def test_info_needs_no_cloud(call):
    # No endpoint, region or credentials at all: info still answers.
    result = call("info", env={})
    assert result.code == 0
    assert result.response == {"protocol": 1, "name": "aws", "version": "1.0.0",
                               "capabilities": {"batch_create": False, "max_batch": 1, "host_key": True,
                                                "stop_start": True}}


# --- create ----------------------------------------------------------------------------------------


def test_create_tags_user_data_and_status(call, aws_env, ec2, ssh_public_key):
    labels = owner()
    env = aws_env(AWS_SSH_USER="admin", AWS_EXTRA_TAGS="team=ci,cost-center=42")
    created = call("create", create_request(labels, "m-1", ssh_public_key), env=env)
    assert created.code == 0, created.stderr
    (machine,) = created.response["machines"]
    assert machine["key"] == "m-1" and machine["state"] in ("creating", "running")
    instance_id = machine["id"]

    instance = instance_of(ec2, instance_id)
    tags = {t["Key"]: t["Value"] for t in instance["Tags"]}
    assert tags["autoscaler-id"] == labels["autoscaler-id"]
    assert tags["autoscaler-pool"] == "aws" and tags["autoscaler-key"] == "m-1"
    assert tags["team"] == "ci" and tags["cost-center"] == "42"
    assert tags["Name"] == "autoscaler-aws-m-1"
    assert instance.get("InstanceLifecycle") != "spot"

    user_data = ec2.describe_instance_attribute(InstanceId=instance_id, Attribute="userData")
    text = base64.b64decode(user_data["UserData"]["Value"]).decode()
    assert text.startswith("#cloud-config\n")
    assert "ssh_authorized_keys:" in text and ssh_public_key in text

    status = call("status", id=instance_id, env=env)
    assert status.code == 0
    body = status.response
    assert body["state"] == "running"
    assert body["address"] == instance["PublicIpAddress"]
    assert body["port"] == 22 and body["user"] == "admin"
    assert body["labels"] == {**labels, "autoscaler-key": "m-1"}  # no Name, no extra tags
    assert "host_key" not in body  # moto's console output has no host key block
    assert "interruption" not in body

    private = call("status", id=instance_id, env=aws_env(AWS_ADDRESS="private")).response
    assert private["address"] == instance["PrivateIpAddress"]


def test_create_merges_pool_user_data(call, aws_env, ec2, ssh_public_key):
    script = "#!/bin/sh\necho hello from the pool > /tmp/hello\n"
    created = call("create", create_request(owner(), "m-ud", ssh_public_key, user_data=script), env=aws_env())
    assert created.code == 0, created.stderr
    instance_id = created.response["machines"][0]["id"]
    raw = base64.b64decode(
        ec2.describe_instance_attribute(InstanceId=instance_id, Attribute="userData")["UserData"]["Value"])
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    message = email.message_from_bytes(raw)
    assert message.is_multipart()
    parts = {part.get_content_type(): part.get_payload(decode=True).decode() for part in message.get_payload()}
    assert parts["text/x-shellscript"] == script
    assert ssh_public_key in parts["text/cloud-config"]



def test_create_gzips_large_user_data(call, aws_env, ec2, ssh_public_key):
    # Random text compresses poorly only a little; 20 KiB of repeated lines compresses well.
    script = "#!/bin/sh\n" + "echo 'a line of a long provisioning script'\n" * 500
    assert len(script) > 16 * 1024
    created = call("create", create_request(owner(), "m-big", ssh_public_key, user_data=script), env=aws_env())
    assert created.code == 0, created.stderr
    instance_id = created.response["machines"][0]["id"]
    raw = base64.b64decode(
        ec2.describe_instance_attribute(InstanceId=instance_id, Attribute="userData")["UserData"]["Value"])
    assert raw[:2] == b"\x1f\x8b" and len(raw) <= 16 * 1024
    assert ssh_public_key.encode() in gzip.decompress(raw)


def test_create_with_network_settings(call, aws_env, ec2, ssh_public_key):
    subnet = ec2.describe_subnets()["Subnets"][-1]
    group = ec2.create_security_group(GroupName=f"runners-{uuid.uuid4().hex[:6]}", Description="runners",
                                      VpcId=subnet["VpcId"])["GroupId"]
    for public_ip in ("true", None):
        settings = {"AWS_SUBNET_ID": subnet["SubnetId"], "AWS_SECURITY_GROUP_IDS": group}
        if public_ip:
            settings["AWS_ASSOCIATE_PUBLIC_IP"] = public_ip
        created = call("create", create_request(owner(), "m-net", ssh_public_key), env=aws_env(**settings))
        assert created.code == 0, created.stderr
        instance = instance_of(ec2, created.response["machines"][0]["id"])
        assert instance["SubnetId"] == subnet["SubnetId"]
        # moto lists the groups of an explicit network interface on the interface only.
        groups = instance["SecurityGroups"] or instance["NetworkInterfaces"][0]["Groups"]
        assert [g["GroupId"] for g in groups] == [group]
        assert instance.get("PublicIpAddress")

def test_create_is_idempotent_by_key(call, aws_env, ec2, proxy, ssh_public_key):
    labels = owner()
    env = aws_env(proxy.url)
    first = call("create", create_request(labels, "m-idem", ssh_public_key), env=env)
    second = call("create", create_request(labels, "m-idem", ssh_public_key), env=env)
    assert first.code == 0 and second.code == 0
    assert first.response["machines"][0]["id"] == second.response["machines"][0]["id"]
    # The second create found the machine by its tags and launched nothing.
    runs = proxy.actions("RunInstances")
    assert len(runs) == 1
    token = runs[0]["ClientToken"]
    assert 0 < len(token) <= 64 and token.isascii()
    found = ec2.describe_instances(Filters=[{"Name": "tag:autoscaler-id", "Values": [labels["autoscaler-id"]]}])
    assert sum(len(r["Instances"]) for r in found["Reservations"]) == 1

    # Another key gets another token.
    other = call("create", create_request(labels, "m-other", ssh_public_key), env=env)
    assert other.code == 0
    assert proxy.actions("RunInstances")[-1]["ClientToken"] != token


def test_create_uses_client_token_when_describe_lags(call, aws_env, proxy, ssh_public_key):
    """DescribeInstances is eventually consistent on EC2: right after a launch, a retried create
    may not see the instance by its tags. The ClientToken makes EC2 answer the same instance;
    the proxy emulates that (moto ignores ClientToken) and hides the instance from the lookup."""
    proxy.emulate_client_token()
    proxy.answer(
        "DescribeInstances",
        '<DescribeInstancesResponse xmlns="http://ec2.amazonaws.com/doc/2016-11-15/">'
        "<requestId>stale</requestId><reservationSet/></DescribeInstancesResponse>",
    )
    labels = owner()
    env = aws_env(proxy.url)
    first = call("create", create_request(labels, "m-token", ssh_public_key), env=env)
    second = call("create", create_request(labels, "m-token", ssh_public_key), env=env)
    assert first.code == 0 and second.code == 0, first.stderr + second.stderr
    assert first.response["machines"][0]["id"] == second.response["machines"][0]["id"]
    tokens = [p["ClientToken"] for p in proxy.actions("RunInstances")]
    assert len(tokens) == 2 and tokens[0] == tokens[1]


# --- list ------------------------------------------------------------------------------------------


def test_list_paginates_and_filters_by_labels(call, aws_env, ec2, ami, proxy):
    labels = owner()
    count = 23
    for n in range(count):  # one reservation each, as the provisioner makes them
        tags = {**labels, "autoscaler-key": f"k-{n}"}
        ec2.run_instances(ImageId=ami, MinCount=1, MaxCount=1, TagSpecifications=[
            {"ResourceType": "instance", "Tags": [{"Key": k, "Value": v} for k, v in tags.items()]}])
    # Same pool, another autoscaler: not listed.
    ec2.run_instances(ImageId=ami, MinCount=1, MaxCount=1, TagSpecifications=[{"ResourceType": "instance", "Tags": [
        {"Key": "autoscaler-id", "Value": "someone-else"}, {"Key": "autoscaler-pool", "Value": "aws"}]}])

    listed = call("list", {"labels": labels}, env=aws_env(proxy.url, AWS_PAGE_SIZE="5"))
    assert listed.code == 0, listed.stderr
    machines = listed.response["machines"]
    assert len(machines) == count
    assert {m["labels"]["autoscaler-key"] for m in machines} == {f"k-{n}" for n in range(count)}
    assert all(m["labels"]["autoscaler-id"] == labels["autoscaler-id"] for m in machines)
    assert all(m["state"] in ("creating", "running") for m in machines)
    pages = proxy.actions("DescribeInstances")
    assert len(pages) >= count // 5 + 1
    assert all(p.get("MaxResults") == "5" for p in pages)
    assert pages[1].get("NextToken")

    # Terminated instances drop out of the list.
    victim = machines[0]["id"]
    ec2.terminate_instances(InstanceIds=[victim])
    again = call("list", {"labels": labels}, env=aws_env()).response["machines"]
    live = {m["id"]: m["state"] for m in again}
    assert victim not in live or live[victim] == "stopping"
    ec2.describe_instances(InstanceIds=[victim])  # moto: terminated after one more look
    assert victim not in {m["id"] for m in call("list", {"labels": labels}, env=aws_env()).response["machines"]}


# --- status and destroy ----------------------------------------------------------------------------


def test_status_and_destroy_of_unknown_ids(call, aws_env):
    env = aws_env()
    for machine_id in ("i-0123456789abcdef0", "not-an-instance-id"):
        assert call("status", id=machine_id, env=env).response == {"id": machine_id, "state": "gone"}
        assert call("destroy", id=machine_id, env=env).response == {"id": machine_id, "state": "gone"}


def test_destroy_refuses_instances_it_did_not_make(call, aws_env, ec2, ami):
    instance_id = ec2.run_instances(ImageId=ami, MinCount=1, MaxCount=1)["Instances"][0]["InstanceId"]
    result = call("destroy", id=instance_id, env=aws_env())
    assert result.code == 78
    assert "autoscaler-key" in result.response["error"]
    assert instance_of(ec2, instance_id)["State"]["Name"] in ("pending", "running")


def test_host_key_from_console_output(call, aws_env, proxy, ssh_public_key):
    env = aws_env(proxy.url)
    instance_id = call("create", create_request(owner(), "m-hk", ssh_public_key), env=env).response["machines"][0]["id"]

    def key_blob(kind: str) -> str:
        name = kind.encode()
        return base64.b64encode(len(name).to_bytes(4, "big") + name + b"\x00\x00\x00\x20" + bytes(range(32))).decode()

    ed25519 = f"ssh-ed25519 {key_blob('ssh-ed25519')}"
    console = (
        "[    0.000000] Linux version 6.1.0\n"
        "ci-info: no authorized SSH keys fingerprints found for user ubuntu.\n"
        "-----BEGIN SSH HOST KEY KEYS-----\n"
        f"ecdsa-sha2-nistp256 {key_blob('ecdsa-sha2-nistp256')} root@ip-10-0-0-1\n"
        f"{ed25519} root@ip-10-0-0-1\n"
        "-----END SSH HOST KEY KEYS-----\n"
        "[   12.345678] cloud-init[512]: Cloud-init v. 23.1 finished\n"
    )
    proxy.answer(
        "GetConsoleOutput",
        '<GetConsoleOutputResponse xmlns="http://ec2.amazonaws.com/doc/2016-11-15/">'
        f"<requestId>{uuid.uuid4()}</requestId><instanceId>{instance_id}</instanceId>"
        "<timestamp>2030-01-01T00:00:00.000Z</timestamp>"
        f"<output>{base64.b64encode(console.encode()).decode()}</output></GetConsoleOutputResponse>",
    )
    status = call("status", id=instance_id, env=env)
    assert status.response["state"] == "running"
    assert status.response["host_key"] == ed25519

    # Console output unreadable (no permission): no host key, and no failure.
    proxy.rules.clear()
    proxy.fail("GetConsoleOutput", "UnauthorizedOperation", "You are not authorized to perform this operation.", 403)
    status = call("status", id=instance_id, env=env)
    assert status.code == 0 and status.response["state"] == "running"
    assert "host_key" not in status.response
    assert "UnauthorizedOperation" in status.stderr
