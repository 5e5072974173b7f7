"""The verbs: info, create, list, status, destroy, stop and start."""

from __future__ import annotations

import json
from typing import Any, NoReturn

from .client import compute_api
from .cloud import CALL_TIMEOUT, Cloud, instance_is_missing
from .config import NAME_RE, PUBLIC_KEY_RE, Config, truthy
from .errors import EX_TEMPFAIL, ProvisionerError, log, permanent
from .instances import META_KEY, META_LABELS, address_of, is_spot, metadata_value, original_labels, state_of
from .labels import gce_filter, gce_labels
from .translate import operation_error, translate

NAME = "gcp"
VERSION = "1.0.0"


class Provisioner:
    def __init__(self, config: Config) -> None:
        self.config = config
        self.cloud = Cloud(config)

    def info(self, request: dict[str, Any]) -> dict[str, Any]:
        return {
            "protocol": 1, "name": NAME, "version": VERSION,
            "capabilities": {"batch_create": False, "max_batch": 1, "host_key": False, "stop_start": True},
        }

    # -- create --

    def create(self, request: dict[str, Any]) -> dict[str, Any]:
        machines = request.get("machines")
        if not isinstance(machines, list) or len(machines) != 1 or not isinstance(machines[0], dict):
            permanent("machines must hold exactly one machine (max_batch is 1)")
        key = machines[0].get("key")
        labels = machines[0].get("labels", {})
        if not isinstance(key, str) or not 1 <= len(key) <= 128:
            permanent("machines[0].key must be a string of 1 to 128 characters")
        if not isinstance(labels, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in labels.items()):
            permanent("machines[0].labels must be an object of strings")
        public_key = request.get("ssh_public_key")
        if not isinstance(public_key, str) or not PUBLIC_KEY_RE.fullmatch(public_key.strip()):
            permanent("ssh_public_key must be one OpenSSH public key line")
        user_data = request.get("user_data")
        if user_data is not None and not isinstance(user_data, str):
            permanent("user_data must be a string or null")

        name = self.config.machine_name(key)
        existing = self.cloud.get(name)
        if existing is not None:
            return self._found(key, name, existing)

        body = self._instance_body(name, key, labels, public_key.strip(), user_data)
        log(f"creating instance {name} for key {key} in {self.config.zone}")
        try:
            operation = self.cloud.instances.insert_unary(
                project=self.config.project, zone=self.config.zone, instance_resource=body,
                retry=None, timeout=CALL_TIMEOUT,
            )
        except Exception as error:  # noqa: BLE001
            from google.api_core import exceptions as gexc

            if isinstance(error, gexc.Conflict):
                # Made meanwhile (a create that timed out, or a concurrent one): answer it.
                again = self.cloud.get(name)
                if again is not None:
                    return self._found(key, name, again)
            raise translate(error, f"insert {name}") from error

        operation = self.cloud.wait(operation, f"insert {name}", self.config.operation_timeout)
        failure = operation_error(operation, f"insert {name}")
        if failure is not None:
            raise failure
        instance = self.cloud.get(name)
        state = state_of(instance) if instance is not None else "creating"
        if state not in ("creating", "running"):
            state = "creating"
        log(f"instance {name} is {state}")
        return {"machines": [{"key": key, "id": name, "state": state}]}

    def _found(self, key: str, name: str, instance: Any) -> dict[str, Any]:
        stored = metadata_value(instance, META_KEY)
        if stored is not None and stored != key:
            permanent(f"instance {name} exists but belongs to another key ({stored!r})")
        state = state_of(instance)
        log(f"instance {name} already exists for key {key} ({instance.status})")
        return {"machines": [{"key": key, "id": name, "state": state}]}

    def _instance_body(self, name: str, key: str, labels: dict[str, str], public_key: str, user_data: str | None) -> Any:
        compute_v1 = compute_api()
        cfg = self.config
        env = cfg.env
        zone = cfg.zone
        machine_type = env.get("GCE_MACHINE_TYPE") or "e2-standard-2"
        if "/" not in machine_type:
            machine_type = f"zones/{zone}/machineTypes/{machine_type}"
        image = env.get("GCE_IMAGE") or "projects/debian-cloud/global/images/family/debian-12"
        disk_type = env.get("GCE_DISK_TYPE") or "pd-balanced"
        if "/" not in disk_type:
            disk_type = f"zones/{zone}/diskTypes/{disk_type}"

        all_labels = dict(labels)
        all_labels.setdefault("autoscaler-key", key)
        stored = gce_labels(all_labels)
        if len(stored) > 64:
            permanent("GCE allows at most 64 labels per instance")

        items = [
            compute_v1.Items(key="ssh-keys", value=f"{cfg.ssh_user}:{public_key}"),
            compute_v1.Items(key=META_LABELS, value=json.dumps(labels, sort_keys=True, separators=(",", ":"))),
            compute_v1.Items(key=META_KEY, value=key),
        ]
        if truthy(env.get("GCE_DISABLE_OS_LOGIN"), True):
            # Keys in "ssh-keys" are ignored while OS Login is on.
            items.append(compute_v1.Items(key="enable-oslogin", value="FALSE"))
        if user_data is not None:
            items.append(compute_v1.Items(key="user-data", value=user_data))

        nic = compute_v1.NetworkInterface(network=env.get("GCE_NETWORK") or "global/networks/default")
        if env.get("GCE_SUBNETWORK"):
            nic.subnetwork = env["GCE_SUBNETWORK"]
        if cfg.external_ip:
            nic.access_configs = [compute_v1.AccessConfig(name="External NAT", type_="ONE_TO_ONE_NAT")]
        elif cfg.address_kind == "external":
            permanent("GCE_ADDRESS=external needs GCE_EXTERNAL_IP=true")

        disk_size = cfg._int("GCE_DISK_SIZE_GB", 20, 10, 65536)
        disk = compute_v1.AttachedDisk(
            boot=True, auto_delete=True, type_="PERSISTENT",
            initialize_params=compute_v1.AttachedDiskInitializeParams(
                source_image=image, disk_size_gb=disk_size, disk_type=disk_type,
            ),
        )

        scheduling = compute_v1.Scheduling()
        if truthy(env.get("GCE_SPOT")):
            action = (env.get("GCE_SPOT_TERMINATION_ACTION") or "DELETE").upper()
            if action not in ("DELETE", "STOP"):
                permanent(f"GCE_SPOT_TERMINATION_ACTION={action!r}: want DELETE or STOP")
            scheduling = compute_v1.Scheduling(
                provisioning_model="SPOT", instance_termination_action=action,
                automatic_restart=False, on_host_maintenance="TERMINATE",
            )

        instance = compute_v1.Instance(
            name=name,
            machine_type=machine_type,
            labels=stored,
            metadata=compute_v1.Metadata(items=items),
            disks=[disk],
            network_interfaces=[nic],
            scheduling=scheduling,
        )
        tags = [t.strip() for t in (env.get("GCE_NETWORK_TAGS") or "").split(",") if t.strip()]
        if tags:
            instance.tags = compute_v1.Tags(items=tags)
        if env.get("GCE_SERVICE_ACCOUNT"):
            instance.service_accounts = [compute_v1.ServiceAccount(
                email=env["GCE_SERVICE_ACCOUNT"],
                scopes=[s.strip() for s in (env.get("GCE_SERVICE_ACCOUNT_SCOPES") or "https://www.googleapis.com/auth/cloud-platform").split(",") if s.strip()],
            )]
        return instance

    # -- list --

    def list(self, request: dict[str, Any]) -> dict[str, Any]:
        want = request.get("labels") or {}
        if not isinstance(want, dict) or not all(isinstance(v, str) for v in want.values()):
            permanent("labels must be an object of strings")
        list_request: dict[str, Any] = {
            "project": self.config.project, "zone": self.config.zone, "max_results": self.config.page_size,
        }
        if want:
            list_request["filter"] = gce_filter(want)
        try:
            # The pager follows nextPageToken (pageToken) until the last page.
            instances = list(self.cloud.instances.list(request=list_request, retry=None, timeout=CALL_TIMEOUT))
        except Exception as error:  # noqa: BLE001
            raise translate(error, "list") from error
        chosen = []
        for instance in instances:
            labels = original_labels(instance)
            # The filter compared sanitised values; compare the exact ones too.
            if all(labels.get(k) == v for k, v in want.items()):
                chosen.append((instance, labels))
        suspects = {str(i.id) for i, _ in chosen if is_spot(i) and state_of(i) in ("stopping", "stopped", "failed")}
        preempted = self.cloud.preempted_ids(suspects)
        machines = []
        for instance, labels in chosen:
            entry: dict[str, Any] = {"id": instance.name, "state": state_of(instance), "labels": labels}
            if str(instance.id) in preempted:
                entry["interruption"] = {"reason": "spot_reclaim", "deadline": None}
            machines.append(entry)
        return {"machines": machines}

    # -- status --

    def status(self, machine_id: str) -> dict[str, Any]:
        if not NAME_RE.fullmatch(machine_id):
            return {"id": machine_id, "state": "gone"}  # not a name GCE would accept
        instance = self.cloud.get(machine_id)
        if instance is None:
            return {"id": machine_id, "state": "gone"}
        state = state_of(instance)
        response: dict[str, Any] = {"id": machine_id, "state": state, "labels": original_labels(instance)}
        if state == "running":
            address = address_of(instance, self.config.address_kind)
            if address is None:
                # Addresses come a moment after RUNNING; until then it is not usable.
                response["state"] = "creating"
                response["message"] = f"RUNNING but no {self.config.address_kind} address yet"
            else:
                response.update(address=address, port=22, user=self.config.ssh_user)
        elif state in ("stopping", "stopped", "failed"):
            response["message"] = f"instance is {instance.status}" + (
                f": {instance.status_message}" if instance.status_message else "")
            if is_spot(instance) and self.cloud.preempted_ids({str(instance.id)}):
                response["interruption"] = {"reason": "spot_reclaim", "deadline": None}
        return response

    # -- destroy --

    def destroy(self, machine_id: str) -> dict[str, Any]:
        if not NAME_RE.fullmatch(machine_id):
            return {"id": machine_id, "state": "gone"}
        try:
            self.cloud.instances.delete_unary(
                project=self.config.project, zone=self.config.zone, instance=machine_id,
                retry=None, timeout=CALL_TIMEOUT,
            )
        except Exception as error:  # noqa: BLE001
            if instance_is_missing(error, self.config, machine_id):
                return {"id": machine_id, "state": "gone"}
            raise translate(error, f"delete {machine_id}") from error
        log(f"deleting instance {machine_id}")
        # GCE deletes asynchronously: status reports "stopping" until the instance is gone.
        return {"id": machine_id, "state": "stopping"}


    # -- stop / start --

    def stop(self, machine_id: str) -> dict[str, Any]:
        instance = self.cloud.get(machine_id) if NAME_RE.fullmatch(machine_id) else None
        if instance is None:
            return {"id": machine_id, "state": "gone"}
        state = state_of(instance)
        if state in ("stopped", "stopping"):
            return {"id": machine_id, "state": state}
        if state not in ("running", "starting"):
            refuse_power("stop", machine_id, instance)
        self.power("stop", machine_id)
        # GCE stops asynchronously: status reports "stopping" until the instance is TERMINATED.
        return {"id": machine_id, "state": "stopping"}

    def start(self, machine_id: str) -> dict[str, Any]:
        instance = self.cloud.get(machine_id) if NAME_RE.fullmatch(machine_id) else None
        if instance is None:
            return {"id": machine_id, "state": "gone"}
        state = state_of(instance)
        if state in ("running", "starting"):
            return {"id": machine_id, "state": state}
        if state != "stopped":
            refuse_power("start", machine_id, instance)
        self.power("start", machine_id)
        return {"id": machine_id, "state": "starting"}

    def power(self, verb: str, machine_id: str) -> None:
        """instances.stop or instances.start, without waiting for its operation."""
        try:
            getattr(self.cloud.instances, f"{verb}_unary")(
                project=self.config.project, zone=self.config.zone, instance=machine_id,
                retry=None, timeout=CALL_TIMEOUT,
            )
        except Exception as error:  # noqa: BLE001
            raise translate(error, f"{verb} {machine_id}") from error
        log(f"{verb} of instance {machine_id} asked")


def refuse_power(verb: str, machine_id: str, instance: Any) -> NoReturn:
    """An instance between states may take the verb later (75); a suspended one, never (78)."""
    status = str(instance.status)
    if status == "SUSPENDED":
        permanent(f"instance {machine_id} is SUSPENDED, which this provisioner does not resume: destroy it")
    raise ProvisionerError(EX_TEMPFAIL, f"instance {machine_id} is {status}; {verb} it once that is over", 15)
