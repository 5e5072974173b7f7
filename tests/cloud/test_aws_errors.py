"""provisioners/aws: how EC2's refusals map to the protocol's exits, against moto's EC2 emulator.

Throttling and capacity errors are retry-later (75, with a `retry_after`), refusals no retry
mends are permanent (78); the fixtures and helpers are test_aws.py's, and aws_proxy.Ec2Proxy
injects the errors moto cannot give, in EC2's wire format.
"""

from __future__ import annotations

import re
import sys

import pytest

from test_aws import (  # noqa: F401 (fixtures are found by name)
    ami, aws_env, call, create_request, ec2, moto, owner, provisioner, proxy,
)


@pytest.mark.parametrize("code,status,retry_after", [
    ("RequestLimitExceeded", 503, 10),
    ("InsufficientInstanceCapacity", 500, 60),
    ("InstanceLimitExceeded", 400, 300),
    ("Unavailable", 503, 15),
])
def test_retry_later_errors(call, aws_env, proxy, ssh_public_key, code, status, retry_after):
    proxy.fail("RunInstances", code, f"Injected {code} for the test.", status=status)
    result = call("create", create_request(owner(), "m-err", ssh_public_key), env=aws_env(proxy.url))
    assert result.code == 75, result.stderr
    assert result.response["retry_after"] == retry_after
    message = result.response["error"]
    assert code in message and "\n" not in message
    assert "Traceback" not in result.stderr


def test_throttled_list_is_retry_later(call, aws_env, proxy):
    proxy.fail("DescribeInstances", "RequestLimitExceeded", "Request limit exceeded.", status=503)
    result = call("list", {"labels": owner()}, env=aws_env(proxy.url, AWS_MAX_ATTEMPTS="1"))
    assert result.code == 75
    assert "RequestLimitExceeded" in result.response["error"]
    assert len(proxy.actions("DescribeInstances")) == 1  # AWS_MAX_ATTEMPTS=1: no retry of its own


def test_botocore_retries_are_few(call, aws_env, proxy, ssh_public_key):
    proxy.fail("RunInstances", "RequestLimitExceeded", "Request limit exceeded.", status=503)
    result = call("create", create_request(owner(), "m-few", ssh_public_key), env=aws_env(proxy.url))
    assert result.code == 75
    assert len(proxy.actions("RunInstances")) == 2  # one attempt plus one retry by default


def test_unknown_ami_is_permanent(call, aws_env, ssh_public_key):
    result = call("create", create_request(owner(), "m-ami", ssh_public_key),
                  env=aws_env(AWS_AMI_ID="ami-00000000deadbeef0"))
    assert result.code == 78, result.stderr
    assert "InvalidAMIID" in result.response["error"]
    assert "retry_after" not in result.response


@pytest.mark.parametrize("code,status", [("UnauthorizedOperation", 403), ("InvalidParameterValue", 400),
                                         ("InvalidAMIID.Malformed", 400)])
def test_permanent_errors(call, aws_env, proxy, ssh_public_key, code, status):
    proxy.fail("RunInstances", code, f"Injected {code}.", status=status)
    result = call("create", create_request(owner(), "m-perm", ssh_public_key), env=aws_env(proxy.url))
    assert result.code == 78
    assert code in result.response["error"]


def test_bad_credentials_are_permanent_and_secret_stays_secret(call, aws_env, servers, free_port, ssh_public_key):
    """A moto that checks signatures (INITIAL_NO_AUTH_ACTION_COUNT=0) knows no access key, as EC2
    would not know a wrong one: AuthFailure."""
    port = free_port()
    strict = servers.start([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)], port,
                           env={"INITIAL_NO_AUTH_ACTION_COUNT": "0"})
    env = aws_env(strict.url)
    for verb, request, machine_id in [
        ("create", create_request(owner(), "m-auth", ssh_public_key), None),
        ("list", {"labels": owner()}, None),
        ("status", None, "i-0123456789abcdef0"),
    ]:
        result = call(verb, request, id=machine_id, env=env)
        assert result.code == 78, result.stderr
        assert "AuthFailure" in result.response["error"]


def test_missing_settings_are_permanent(call, aws_env, ssh_public_key):
    no_region = {k: v for k, v in aws_env().items() if k != "AWS_REGION"}
    result = call("list", {"labels": owner()}, env=no_region)
    assert result.code == 78 and "region" in result.response["error"]

    no_ami = {k: v for k, v in aws_env().items() if k != "AWS_AMI_ID"}
    result = call("create", create_request(owner(), "m-x", ssh_public_key), env=no_ami)
    assert result.code == 78 and "AWS_AMI_ID" in result.response["error"]

    result = call("create", create_request(owner(), "m-x", ssh_public_key), env=aws_env(AWS_SPOT="maybe"))
    assert result.code == 78 and "AWS_SPOT" in result.response["error"]

    no_credentials = {k: v for k, v in aws_env().items() if not k.startswith("AWS_SECRET") and k != "AWS_ACCESS_KEY_ID"}
    result = call("list", {"labels": owner()}, env=no_credentials)
    assert result.code == 78 and "NoCredentialsError" in result.response["error"]


def test_unreachable_endpoint_is_retry_later(call, aws_env, free_port):
    result = call("list", {"labels": owner()}, env=aws_env(f"http://127.0.0.1:{free_port()}", AWS_MAX_ATTEMPTS="1"))
    assert result.code == 75
    assert re.search(r"cannot reach|EndpointConnectionError|ConnectionError", result.response["error"])


def test_bad_requests_are_permanent(call, aws_env):
    env = aws_env()
    assert call("list", "{not json", env=env).code == 78
    assert call("frobnicate", env=env).code == 78
    assert call("status", env=env).code == 78  # no id
    assert call("create", {"machines": [], "ssh_public_key": "x"}, env=env).code == 78

