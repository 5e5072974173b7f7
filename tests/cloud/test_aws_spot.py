"""provisioners/aws: spot launches against moto's EC2 emulator (`AWS_SPOT`).

The fixtures and helpers are test_aws.py's; the spot answers moto cannot give (reclaim notices,
the refusals that mean "no spot here, now") come from aws_proxy.Ec2Proxy in EC2's wire format.
"""

from __future__ import annotations

import uuid

import pytest

from test_aws import (  # noqa: F401 (fixtures are found by name)
    ami, aws_env, call, create_request, ec2, instance_of, moto, owner, provisioner, proxy,
)


def spot_requests_xml(instance_id: str, code: str, update_time: str) -> str:
    return (
        '<DescribeSpotInstanceRequestsResponse xmlns="http://ec2.amazonaws.com/doc/2016-11-15/">'
        f"<requestId>{uuid.uuid4()}</requestId><spotInstanceRequestSet><item>"
        "<spotInstanceRequestId>sir-0a1b2c3d4e5f60718</spotInstanceRequestId>"
        "<spotPrice>0.010000</spotPrice><type>one-time</type><state>active</state>"
        f"<status><code>{code}</code><updateTime>{update_time}</updateTime>"
        "<message>Your Spot Instance is marked to be terminated.</message></status>"
        f"<instanceId>{instance_id}</instanceId><productDescription>Linux/UNIX</productDescription>"
        "<instanceInterruptionBehavior>terminate</instanceInterruptionBehavior>"
        "</item></spotInstanceRequestSet></DescribeSpotInstanceRequestsResponse>"
    )


def test_spot_launch_and_reclaim_notice(call, aws_env, ec2, proxy, ssh_public_key):
    labels = owner()
    env = aws_env(proxy.url, AWS_SPOT="spot", AWS_SPOT_MAX_PRICE="0.05")
    created = call("create", create_request(labels, "m-spot", ssh_public_key), env=env)
    assert created.code == 0, created.stderr
    instance_id = created.response["machines"][0]["id"]
    (run,) = proxy.actions("RunInstances")
    assert run["InstanceMarketOptions.MarketType"] == "spot"
    assert run["InstanceMarketOptions.SpotOptions.MaxPrice"] == "0.05"
    assert instance_of(ec2, instance_id)["InstanceLifecycle"] == "spot"

    # Not marked: no interruption.
    assert "interruption" not in call("status", id=instance_id, env=env).response

    # EC2 marks the spot request for termination: status and list report it.
    proxy.answer("DescribeSpotInstanceRequests",
                 spot_requests_xml(instance_id, "marked-for-termination", "2030-01-02T03:04:05.000Z"))
    expected = {"reason": "spot_reclaim", "deadline": "2030-01-02T03:06:05Z"}
    status = call("status", id=instance_id, env=env).response
    assert status["state"] == "running" and status["interruption"] == expected
    listed = {m["id"]: m for m in call("list", {"labels": labels}, env=env).response["machines"]}
    assert listed[instance_id]["interruption"] == expected
    asked = proxy.actions("DescribeSpotInstanceRequests")[-1]
    assert asked["Filter.1.Name"] == "instance-id" and asked["Filter.1.Value.1"] == instance_id

    # Already reclaimed by price: reported without a deadline.
    proxy.rules.clear()
    proxy.answer("DescribeSpotInstanceRequests",
                 spot_requests_xml(instance_id, "instance-terminated-by-price", "2030-01-02T03:06:05.000Z"))
    assert call("status", id=instance_id, env=env).response["interruption"] == {"reason": "spot_reclaim", "deadline": None}


def test_spot_request_status_from_moto(call, aws_env, ec2, ami, proxy):
    """A spot instance moto made through RequestSpotInstances: its real request (fulfilled) gives
    no interruption; the same answer with the code changed to marked-for-stop does."""
    labels = {**owner(), "autoscaler-key": "m-sir"}
    answer = ec2.request_spot_instances(
        InstanceCount=1, LaunchSpecification={"ImageId": ami, "InstanceType": "t3.micro"},
        TagSpecifications=[{"ResourceType": "instance",
                            "Tags": [{"Key": k, "Value": v} for k, v in labels.items()]}])
    instance_id = answer["SpotInstanceRequests"][0]["InstanceId"]
    env = aws_env(proxy.url)
    status = call("status", id=instance_id, env=env).response
    assert status["state"] == "running" and "interruption" not in status
    assert proxy.actions("DescribeSpotInstanceRequests"), "the spot request was not looked at"

    proxy.rewrite("DescribeSpotInstanceRequests",
                  lambda body: body.replace(b"<code>fulfilled</code>", b"<code>marked-for-stop</code>"))
    status = call("status", id=instance_id, env=env).response
    # moto's request says it was updated at 2015-01-01T00:00:00Z.
    assert status["interruption"] == {"reason": "spot_reclaim", "deadline": "2015-01-01T00:02:00Z"}


def test_spot_with_fallback_goes_on_demand(call, aws_env, ec2, proxy, ssh_public_key):
    proxy.fail("RunInstances", "InsufficientInstanceCapacity",
               "We currently do not have sufficient t3.micro capacity in the Availability Zone you requested.",
               status=500, when=lambda p: p.get("InstanceMarketOptions.MarketType") == "spot")
    env = aws_env(proxy.url, AWS_SPOT="spot-with-fallback")
    created = call("create", create_request(owner(), "m-fb", ssh_public_key), env=env)
    assert created.code == 0, created.stderr
    assert "falling back to on-demand" in created.stderr and "InsufficientInstanceCapacity" in created.stderr
    runs = proxy.actions("RunInstances")
    assert runs[0].get("InstanceMarketOptions.MarketType") == "spot"
    assert "InstanceMarketOptions.MarketType" not in runs[-1]
    assert runs[0]["ClientToken"] != runs[-1]["ClientToken"]
    instance = instance_of(ec2, created.response["machines"][0]["id"])
    assert instance.get("InstanceLifecycle") != "spot"

    # Spot only: the same capacity error is a retry-later.
    spot_only = call("create", create_request(owner(), "m-nofb", ssh_public_key), env=aws_env(proxy.url, AWS_SPOT="spot"))
    assert spot_only.code == 75
    assert "InsufficientInstanceCapacity" in spot_only.response["error"]


SPOT_REFUSALS = [
    ("InsufficientInstanceCapacity", 500, "We currently do not have sufficient t3.micro capacity in the Availability Zone you requested."),
    ("InsufficientCapacity", 500, "There is no Spot capacity available that matches your request."),
    ("InsufficientHostCapacity", 500, "Insufficient capacity."),
    ("InsufficientReservedInstanceCapacity", 500, "Insufficient capacity."),
    ("InsufficientCapacityOnHost", 500, "Insufficient capacity on the host."),
    ("SpotMaxPriceTooLow", 400, "Your Spot request price of 0.001 is lower than the minimum required Spot request fulfillment price of 0.0035."),
    ("MaxSpotInstanceCountExceeded", 400, "Max spot instance count exceeded"),
    ("Unsupported", 400, "The requested configuration is currently not supported. Please check the documentation for supported configurations."),
    ("UnsupportedOperation", 400, "Spot Instances are not supported with dedicated tenancy."),
]


@pytest.mark.parametrize("code,status,message", SPOT_REFUSALS, ids=[r[0] for r in SPOT_REFUSALS])
def test_every_no_spot_here_refusal_falls_back_to_on_demand(call, aws_env, ec2, proxy, ssh_public_key, code, status, message):
    proxy.fail("RunInstances", code, message, status=status,
               when=lambda p: p.get("InstanceMarketOptions.MarketType") == "spot")
    created = call("create", create_request(owner(), f"m-{code}", ssh_public_key), env=aws_env(proxy.url, AWS_SPOT="spot-with-fallback"))
    assert created.code == 0, created.stderr
    assert "falling back to on-demand" in created.stderr and code in created.stderr
    # botocore retries 5xx answers itself: one or more spot attempts, then one on-demand.
    markets = [r.get("InstanceMarketOptions.MarketType") for r in proxy.actions("RunInstances")]
    assert markets[0] == "spot" and markets[-1] is None and markets.count(None) == 1, markets
    assert instance_of(ec2, created.response["machines"][0]["id"]).get("InstanceLifecycle") != "spot"


@pytest.mark.parametrize("code,status,exit_code", [
    ("InsufficientFreeAddressesInSubnet", 500, 75),
    ("InvalidParameterValue", 400, 78),
    ("UnauthorizedOperation", 403, 78),
    ("RequestLimitExceeded", 503, 75),
])
def test_refusals_on_demand_would_share_do_not_fall_back(call, aws_env, proxy, ssh_public_key, code, status, exit_code):
    proxy.fail("RunInstances", code, "refused", status=status,
               when=lambda p: p.get("InstanceMarketOptions.MarketType") == "spot")
    created = call("create", create_request(owner(), f"m-{code}", ssh_public_key), env=aws_env(proxy.url, AWS_SPOT="spot-with-fallback"))
    assert created.code == exit_code, created.stderr
    assert code in created.response["error"]
    assert "falling back" not in created.stderr
    assert all(r.get("InstanceMarketOptions.MarketType") == "spot" for r in proxy.actions("RunInstances"))


def test_an_on_demand_refusal_after_the_fallback_is_the_answer(call, aws_env, proxy, ssh_public_key):
    proxy.fail("RunInstances", "Unsupported", "The requested configuration is currently not supported.", status=400)
    created = call("create", create_request(owner(), "m-nowhere", ssh_public_key), env=aws_env(proxy.url, AWS_SPOT="spot-with-fallback"))
    assert created.code == 78, created.stderr
    assert "falling back to on-demand" in created.stderr and "Unsupported" in created.response["error"]
    markets = [r.get("InstanceMarketOptions.MarketType") for r in proxy.actions("RunInstances")]
    assert markets == ["spot", None], markets
