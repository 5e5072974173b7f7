"""What an instance (as the library returns it) says: its protocol state, its exact labels, its
metadata, whether it is spot, its address."""

from __future__ import annotations

import json
from typing import Any

# Metadata items this provisioner owns on every instance.
META_LABELS = "autoscaler-labels"  # JSON object: the labels exactly as the autoscaler gave them
META_KEY = "autoscaler-idempotency-key"  # the idempotency key, verbatim

# GCE instance status -> protocol state. TERMINATED is GCE's stopped (by instances.stop, or by a
# spot preemption whose action is STOP). SUSPENDED is "failed": this provisioner never suspends,
# and start cannot resume it; "failed" makes the autoscaler destroy it. PROVISIONING and STAGING
# of an instance that was stopped before are "starting" (see state_of).
STATES = {
    "PROVISIONING": "creating",
    "STAGING": "creating",
    "REPAIRING": "creating",
    "RUNNING": "running",
    "STOPPING": "stopping",
    "SUSPENDING": "stopping",
    "PENDING_STOP": "stopping",
    "TERMINATED": "stopped",
    "SUSPENDED": "failed",
}
BOOTING = {"PROVISIONING", "STAGING"}


def state_of(instance: Any) -> str:
    status = str(instance.status)
    if status in BOOTING and instance.last_stop_timestamp:
        return "starting"  # booting again after a stop, not for the first time
    return STATES.get(status, "creating")


def original_labels(instance: Any) -> dict[str, str]:
    for item in instance.metadata.items:
        if item.key == META_LABELS:
            try:
                labels = json.loads(item.value)
            except ValueError:
                break
            if isinstance(labels, dict) and all(isinstance(v, str) for v in labels.values()):
                return labels
    return dict(instance.labels)


def metadata_value(instance: Any, key: str) -> str | None:
    for item in instance.metadata.items:
        if item.key == key:
            return item.value
    return None


def is_spot(instance: Any) -> bool:
    scheduling = instance.scheduling
    return str(scheduling.provisioning_model) == "SPOT" or bool(scheduling.preemptible)


def address_of(instance: Any, kind: str) -> str | None:
    for nic in instance.network_interfaces:
        if kind == "external":
            for access in nic.access_configs:
                if access.nat_i_p:
                    return access.nat_i_p
        elif nic.network_i_p:
            return nic.network_i_p
    return None
