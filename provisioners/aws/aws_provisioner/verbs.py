"""The verbs: Provisioner answers info, create, list, status, destroy, stop and start."""

from __future__ import annotations

import datetime
import hashlib
import json
import re
from typing import Any

from . import NAME, VERSION
from .cloud import SPOT_FALLBACK_CODES, Cloud
from .config import Config, flag, words
from .errors import EX_ERROR, EX_TEMPFAIL, ProvisionerError, log, one_line, permanent
from .instances import (
    LIVE_STATES, STARTED_TAG, STATES, is_spot, protocol_state, rfc3339, tag_filter_value, tags_of,
)
from .user_data import build_user_data

ID_RE = re.compile(r"i-[0-9a-f]{8,17}")
PUBLIC_KEY_RE = re.compile(r"(ssh-ed25519|ssh-rsa|ecdsa-sha2-nistp(256|384|521)) [A-Za-z0-9+/=]+( [^\n]*)?")


class Provisioner:
    def __init__(self, config: Config) -> None:
        self.config = config
        self._cloud: Cloud | None = None
        self.spot_refusal: str | None = None  # the code of the last spot launch's "no spot here, now"

    @property
    def cloud(self) -> Cloud:
        if self._cloud is None:
            self._cloud = Cloud(self.config)
        return self._cloud

    def info(self, request: dict[str, Any]) -> dict[str, Any]:
        return {
            "protocol": 1, "name": NAME, "version": VERSION,
            "capabilities": {"batch_create": False, "max_batch": 1, "host_key": self.config.host_key,
                             "stop_start": self.stops_its_machines()},
        }

    def stops_its_machines(self) -> bool:
        """Only an on-demand pool declares stop_start: its every machine can be stopped, which a
        one-time spot instance cannot. A bad AWS_SPOT is create's to report, not info's."""
        try:
            return self.config.spot == "off"
        except ProvisionerError:
            return False

    # create

    def create(self, request: dict[str, Any]) -> dict[str, Any]:
        machines = request.get("machines")
        if not isinstance(machines, list) or not machines:
            permanent("create needs a non-empty machines array")
        public_key = request.get("ssh_public_key")
        if not isinstance(public_key, str) or not PUBLIC_KEY_RE.fullmatch(public_key.strip()):
            permanent("create needs ssh_public_key, an OpenSSH public key")
        user_data = request.get("user_data")
        if user_data is not None and not isinstance(user_data, str):
            permanent("user_data must be a string or null")
        items = []
        for item in machines:
            key = item.get("key") if isinstance(item, dict) else None
            labels = item.get("labels") if isinstance(item, dict) else None
            if not isinstance(key, str) or not key or len(key) > 128:
                permanent("every machine needs a key (1 to 128 characters)")
            if not isinstance(labels, dict) or not all(isinstance(v, str) for v in labels.values()):
                permanent(f"machine {key}: labels must be an object of strings")
            items.append((key, {**labels, "autoscaler-key": key}))
        document = build_user_data(public_key.strip(), user_data)

        made: list[dict[str, Any]] = []
        for key, labels in items:
            try:
                made.append(self.create_one(key, labels, document))
            except ProvisionerError:
                if not made:
                    raise
                log(f"machine {key} not created this time; the autoscaler will retry it")
        return {"machines": made}

    def create_one(self, key: str, labels: dict[str, str], user_data: bytes) -> dict[str, Any]:
        config = self.config
        existing = self.find_by_labels(labels, states=["pending", "running"])
        if existing:
            instance = existing[0]
            state = STATES.get(instance["State"]["Name"], "creating")
            log(f"instance {instance['InstanceId']} already has key {key} ({state})")
            return {"key": key, "id": instance["InstanceId"], "state": state}

        tags = {**config.extra_tags, "Name": f"autoscaler-{config.pool}-{key}"[:255], **labels}
        tag_list = [{"Key": k, "Value": v} for k, v in tags.items()]
        params: dict[str, Any] = {
            "ImageId": config.image,
            "InstanceType": config.instance_type,
            "MinCount": 1,
            "MaxCount": 1,
            "UserData": user_data,
            "TagSpecifications": [
                {"ResourceType": "instance", "Tags": tag_list},
                {"ResourceType": "volume", "Tags": tag_list},
            ],
            "InstanceInitiatedShutdownBehavior": "terminate",
            "MetadataOptions": {"HttpTokens": "required", "HttpEndpoint": "enabled"},
        }
        env = config.env
        subnet = (env.get("AWS_SUBNET_ID") or "").strip()
        groups = words(env, "AWS_SECURITY_GROUP_IDS")
        public_ip = flag(env, "AWS_ASSOCIATE_PUBLIC_IP", None)
        if public_ip is not None:
            nic: dict[str, Any] = {"DeviceIndex": 0, "AssociatePublicIpAddress": public_ip,
                                   "DeleteOnTermination": True}
            if subnet:
                nic["SubnetId"] = subnet
            if groups:
                nic["Groups"] = groups
            params["NetworkInterfaces"] = [nic]
        else:
            if subnet:
                params["SubnetId"] = subnet
            if groups:
                params["SecurityGroupIds"] = groups
        if env.get("AWS_KEY_NAME"):
            params["KeyName"] = env["AWS_KEY_NAME"].strip()
        profile = (env.get("AWS_IAM_INSTANCE_PROFILE") or "").strip()
        if profile:
            params["IamInstanceProfile"] = {"Arn": profile} if profile.startswith("arn:") else {"Name": profile}

        spot = config.spot
        if spot != "off":
            options: dict[str, Any] = {"SpotInstanceType": "one-time", "InstanceInterruptionBehavior": "terminate"}
            if env.get("AWS_SPOT_MAX_PRICE"):
                options["MaxPrice"] = env["AWS_SPOT_MAX_PRICE"].strip()
            try:
                return self.launch(key, labels, {**params, "InstanceMarketOptions": {"MarketType": "spot", "SpotOptions": options}}, "spot")
            except ProvisionerError as error:
                if spot != "spot-with-fallback" or not self.spot_refusal:
                    raise
                log(f"spot launch refused ({self.spot_refusal}: no spot here, now); falling back to on-demand for key {key}")
        return self.launch(key, labels, params, "on-demand")

    def launch(self, key: str, labels: dict[str, str], params: dict[str, Any], market: str) -> dict[str, Any]:
        # The token names the machine: the same key in the same pool of the same autoscaler
        # and market always gets the same token (EC2 allows 64 ASCII characters).
        seed = json.dumps([labels.get("autoscaler-id", ""), self.config.pool, key, market])
        token = f"as-{market[:2]}-{hashlib.sha256(seed.encode()).hexdigest()[:56]}"
        self.spot_refusal = None
        try:
            answer = self.cloud.ec2.run_instances(ClientToken=token, **params)
        except Exception as error:  # noqa: BLE001
            code = self.cloud.error_code(error)
            if market == "spot" and code in SPOT_FALLBACK_CODES:
                self.spot_refusal = code
            self.cloud.fail("run_instances", error)
        instance = (answer.get("Instances") or [{}])[0]
        instance_id = instance.get("InstanceId")
        if not instance_id:
            raise ProvisionerError(EX_ERROR, "EC2 run_instances answered no instance")
        state = STATES.get((instance.get("State") or {}).get("Name", "pending"), "creating")
        log(f"launched {market} instance {instance_id} ({self.config.instance_type}) for key {key}")
        return {"key": key, "id": instance_id, "state": state if state in ("creating", "running") else "creating"}

    def find_by_labels(self, labels: dict[str, str], states: list[str]) -> list[dict[str, Any]]:
        filters = [{"Name": f"tag:{k}", "Values": [tag_filter_value(v)]} for k, v in sorted(labels.items())]
        filters.append({"Name": "instance-state-name", "Values": states})
        found = self.cloud.instances(filters)
        # Check again here: filters are case-insensitive on some fields and accept wildcards.
        return [i for i in found if all(tags_of(i).get(k) == v for k, v in labels.items())]

    # list / status / destroy

    def labels_of(self, instance: dict[str, Any]) -> dict[str, str]:
        extra = self.config.extra_tags
        return {k: v for k, v in tags_of(instance).items()
                if k not in ("Name", STARTED_TAG) and not k.startswith("aws:") and k not in extra}

    def list(self, request: dict[str, Any]) -> dict[str, Any]:
        want = request.get("labels")
        if not isinstance(want, dict) or not all(isinstance(v, str) for v in want.values()):
            permanent("labels must be an object of strings")
        instances = self.find_by_labels(want, LIVE_STATES)
        interrupted = self.cloud.interruptions(instances)
        machines = []
        for instance in instances:
            entry: dict[str, Any] = {
                "id": instance["InstanceId"],
                "state": protocol_state(instance),
                "labels": self.labels_of(instance),
            }
            if instance["InstanceId"] in interrupted:
                entry["interruption"] = interrupted[instance["InstanceId"]]
            machines.append(entry)
        return {"machines": machines}

    def status(self, instance_id: str) -> dict[str, Any]:
        if not ID_RE.fullmatch(instance_id):
            return {"id": instance_id, "state": "gone"}
        instance = self.cloud.instance(instance_id)
        if instance is None:
            return {"id": instance_id, "state": "gone"}
        state = protocol_state(instance)
        if state == "gone":
            return {"id": instance_id, "state": "gone"}
        response: dict[str, Any] = {"id": instance_id, "state": state, "labels": self.labels_of(instance)}
        if state == "running":
            field = "PublicIpAddress" if self.config.address == "public" else "PrivateIpAddress"
            address = instance.get(field)
            if not address:
                response["state"] = "failed"
                response["message"] = (
                    f"instance has no {self.config.address} IP address "
                    "(set AWS_ASSOCIATE_PUBLIC_IP=true or AWS_ADDRESS=private)"
                )
            else:
                response.update(address=address, port=self.config.ssh_port, user=self.config.ssh_user)
                if self.config.host_key:
                    host_key = self.cloud.console_host_key(instance_id)
                    if host_key:
                        response["host_key"] = host_key
        elif state == "stopped":
            reason = (instance.get("StateReason") or {}).get("Message")
            if reason:
                response["message"] = one_line(reason)
        interruption = self.cloud.interruptions([instance]).get(instance_id)
        if interruption:
            response["interruption"] = interruption
            response.setdefault("message", "EC2 is reclaiming this spot instance")
        return response

    def destroy(self, instance_id: str) -> dict[str, Any]:
        if not ID_RE.fullmatch(instance_id):
            return {"id": instance_id, "state": "gone"}
        instance = self.cloud.instance(instance_id)
        if instance is None or instance["State"]["Name"] == "terminated":
            return {"id": instance_id, "state": "gone"}
        if "autoscaler-key" not in tags_of(instance):
            permanent(f"instance {instance_id} has no autoscaler-key tag: not one of ours, not terminating it")
        if instance["State"]["Name"] == "shutting-down":
            return {"id": instance_id, "state": "stopping"}
        log(f"terminating instance {instance_id}")
        try:
            answer = self.cloud.ec2.terminate_instances(InstanceIds=[instance_id])
        except Exception as error:  # noqa: BLE001
            if self.cloud.error_code(error) in ("InvalidInstanceID.NotFound", "InvalidInstanceID.Malformed"):
                return {"id": instance_id, "state": "gone"}
            self.cloud.fail("terminate_instances", error)
        changes = answer.get("TerminatingInstances") or [{}]
        now = (changes[0].get("CurrentState") or {}).get("Name", "shutting-down")
        return {"id": instance_id, "state": "gone" if now == "terminated" else "stopping"}


    # stop / start

    def ours(self, instance_id: str) -> dict[str, Any] | None:
        """The live instance, None when it is gone; refuses one this autoscaler did not make."""
        if not ID_RE.fullmatch(instance_id):
            return None
        instance = self.cloud.instance(instance_id)
        if instance is None or instance["State"]["Name"] == "terminated":
            return None
        if "autoscaler-key" not in tags_of(instance):
            permanent(f"instance {instance_id} has no autoscaler-key tag: not one of ours, not touching it")
        return instance

    def stop(self, instance_id: str) -> dict[str, Any]:
        instance = self.ours(instance_id)
        if instance is None:
            return {"id": instance_id, "state": "gone"}
        ec2_state = instance["State"]["Name"]
        if ec2_state in ("stopped", "stopping"):
            return {"id": instance_id, "state": STATES[ec2_state]}
        if ec2_state == "shutting-down":
            raise ProvisionerError(EX_TEMPFAIL, f"instance {instance_id} is being terminated", 15)
        if is_spot(instance):
            # Our spot requests are one-time, and EC2 stops only instances of persistent ones:
            # asking again will never work, so this is permanent for this machine (not the pool).
            permanent(f"instance {instance_id} is a one-time spot instance, which EC2 cannot stop; destroy it instead")
        if ec2_state != "running":
            raise ProvisionerError(EX_TEMPFAIL, f"instance {instance_id} is {protocol_state(instance)}; stop it once it runs", 15)
        log(f"stopping instance {instance_id}")
        answer = self.power("stop_instances", instance_id)
        changes = answer.get("StoppingInstances") or [{}]
        now = (changes[0].get("CurrentState") or {}).get("Name", "stopping")
        return {"id": instance_id, "state": "stopped" if now == "stopped" else "stopping"}

    def start(self, instance_id: str) -> dict[str, Any]:
        instance = self.ours(instance_id)
        if instance is None:
            return {"id": instance_id, "state": "gone"}
        state = protocol_state(instance)
        if state in ("running", "starting"):
            return {"id": instance_id, "state": state}
        if state != "stopped":
            raise ProvisionerError(EX_TEMPFAIL, f"instance {instance_id} is {state}; start it once it has stopped", 15)
        # Tagged first, so that a start whose answer is lost still reads as starting.
        try:
            self.cloud.ec2.create_tags(Resources=[instance_id], Tags=[{"Key": STARTED_TAG, "Value": rfc3339(
                datetime.datetime.now(datetime.timezone.utc))}])
        except Exception as error:  # noqa: BLE001
            self.cloud.fail("create_tags", error)
        log(f"starting instance {instance_id}")
        answer = self.power("start_instances", instance_id)
        changes = answer.get("StartingInstances") or [{}]
        now = (changes[0].get("CurrentState") or {}).get("Name", "pending")
        return {"id": instance_id, "state": "running" if now == "running" else "starting"}

    def power(self, operation: str, instance_id: str) -> dict[str, Any]:
        """StopInstances or StartInstances on one instance. EC2's IncorrectInstanceState (the
        instance moved meanwhile) is worth asking again later."""
        try:
            return getattr(self.cloud.ec2, operation)(InstanceIds=[instance_id])
        except Exception as error:  # noqa: BLE001
            if self.cloud.error_code(error) == "IncorrectInstanceState":
                raise ProvisionerError(EX_TEMPFAIL, f"EC2 {operation}: instance {instance_id} is between states", 15)
            self.cloud.fail(operation, error)
