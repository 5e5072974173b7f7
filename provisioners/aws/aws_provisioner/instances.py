"""EC2 instance descriptions in the protocol's words: states, tags, spot reclaims."""

from __future__ import annotations

import datetime
import re
from typing import Any

# Instance states as protocol states ("pending" is "starting" for a started instance, see
# protocol_state).
STATES = {
    "pending": "creating",
    "running": "running",
    "shutting-down": "stopping",
    "stopping": "stopping",
    "stopped": "stopped",
    "terminated": "gone",
}
# Set on an instance when start is asked of it: its later "pending" is a restart, not a launch.
# Kept out of the labels (it is the provisioner's, not the autoscaler's).
STARTED_TAG = "autoscaler-started"
LIVE_STATES = ["pending", "running", "shutting-down", "stopping", "stopped"]

# Spot request status codes (describe_spot_instance_requests Status.Code) that mean EC2 is taking
# the instance back. "marked-*" come with the two-minute notice; the others are after the fact.
NOTICE_CODES = {"marked-for-termination", "marked-for-stop", "marked-for-hibernation"}
RECLAIMED_CODES = {
    "instance-terminated-by-price",
    "instance-terminated-no-capacity",
    "instance-terminated-capacity-oversubscribed",
    "instance-terminated-launch-group-constraint",
    "instance-stopped-by-price",
    "instance-stopped-no-capacity",
    "instance-stopped-capacity-oversubscribed",
    "instance-hibernated-by-price",
    "instance-hibernated-no-capacity",
    "instance-hibernated-capacity-oversubscribed",
}
NOTICE_SECONDS = 120


def rfc3339(when: datetime.datetime) -> str:
    if when.tzinfo is None:
        when = when.replace(tzinfo=datetime.timezone.utc)
    return when.astimezone(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def tag_filter_value(value: str) -> str:
    """EC2 filter values treat * ? and \\ as wildcards/escapes; match them literally."""
    return re.sub(r"([*?\\])", r"\\\1", value)


def tags_of(instance: dict[str, Any]) -> dict[str, str]:
    return {t["Key"]: t.get("Value", "") for t in instance.get("Tags") or []}


def protocol_state(instance: dict[str, Any]) -> str:
    """The instance's state in the protocol's words."""
    ec2_state = instance["State"]["Name"]
    if ec2_state == "pending" and STARTED_TAG in tags_of(instance):
        return "starting"
    return STATES.get(ec2_state, "creating")


def is_spot(instance: dict[str, Any]) -> bool:
    return instance.get("InstanceLifecycle") == "spot" or bool(instance.get("SpotInstanceRequestId"))


def interruption_of(request: dict[str, Any]) -> dict[str, Any] | None:
    status = request.get("Status") or {}
    code = status.get("Code") or ""
    if code not in NOTICE_CODES and code not in RECLAIMED_CODES:
        return None
    deadline = None
    updated = status.get("UpdateTime")
    if code in NOTICE_CODES and isinstance(updated, datetime.datetime):
        deadline = rfc3339(updated + datetime.timedelta(seconds=NOTICE_SECONDS))
    return {"reason": "spot_reclaim", "deadline": deadline}
