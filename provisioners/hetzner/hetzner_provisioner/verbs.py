"""The hcloud client and the protocol verbs: info, create, list, status and destroy."""

from __future__ import annotations

import re
from typing import Any

from .config import Config, truthy
from .errors import is_not_found, log, permanent, translate
from .labels import decoded_labels, hcloud_labels, md5_fingerprint, selector

NAME = "hetzner"
VERSION = "1.0.0"

CALL_TIMEOUT = 30.0

# Hetzner server status -> protocol state. "off" is "failed": such a server still exists (and is
# billed) but runs nothing; "failed" makes the autoscaler destroy it.
STATES = {
    "initializing": "creating",
    "starting": "creating",
    "rebuilding": "creating",
    "running": "running",
    "migrating": "running",
    "stopping": "stopping",
    "deleting": "stopping",
    "off": "failed",
    "unknown": "creating",
}


# --- the provisioner ------------------------------------------------------------------------------


def state_of(server: Any) -> str:
    return STATES.get(str(server.status), "creating")


def address_of(server: Any, kind: str) -> str | None:
    net = server.public_net
    if kind == "ipv4" and net is not None and net.ipv4 is not None and net.ipv4.ip:
        return net.ipv4.ip
    if kind == "ipv6" and net is not None and net.ipv6 is not None and net.ipv6.ip:
        # Hetzner gives each server a /64; the server itself answers on ::1 of it.
        return net.ipv6.ip.split("/")[0].rstrip(":") + "::1" if "/" in net.ipv6.ip else net.ipv6.ip
    if kind == "private":
        for private in server.private_net or []:
            if private.ip:
                return private.ip
    return None


class Provisioner:
    def __init__(self, config: Config) -> None:
        self.config = config
        self._client: Any = None

    @property
    def client(self) -> Any:
        if self._client is None:
            from hcloud import Client

            kwargs: dict[str, Any] = {"application_name": "gitlab-runner-autoscaler", "application_version": VERSION,
                                      "timeout": CALL_TIMEOUT}
            endpoint = self.config.get("HCLOUD_ENDPOINT")
            if endpoint:
                kwargs["api_endpoint"] = endpoint.rstrip("/")
            self._client = Client(self.config.token, **kwargs)
            # The library repeats rate-limited and conflicting calls itself, sleeping up to a
            # minute; the autoscaler has its own backoff, so by default no call is repeated here.
            base = getattr(self._client, "_client", None)
            if base is not None and hasattr(base, "_retry_max_retries"):
                base._retry_max_retries = self.config.number("HCLOUD_RETRIES", 0, 0, 5)
            self._client.servers.max_per_page = self.config.number("HCLOUD_PAGE_SIZE", 50, 1, 50)
        return self._client

    def info(self, request: dict[str, Any]) -> dict[str, Any]:
        return {
            "protocol": 1, "name": NAME, "version": VERSION,
            "capabilities": {"batch_create": False, "max_batch": 1, "host_key": False},
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
        if not isinstance(public_key, str):
            permanent("ssh_public_key must be one OpenSSH public key line")
        public_key = public_key.strip()
        fingerprint = md5_fingerprint(public_key)
        user_data = request.get("user_data")
        if user_data is not None and not isinstance(user_data, str):
            permanent("user_data must be a string or null")
        if user_data is not None and len(user_data.encode()) > 32 * 1024:
            permanent("user_data is larger than the 32 KiB Hetzner accepts")

        all_labels = dict(labels)
        all_labels["autoscaler-key"] = key
        stored = hcloud_labels(all_labels)
        name = self.config.machine_name(key)

        # Idempotency: a server that already carries this key (and the rest of the labels).
        found = self._find(selector(all_labels), name)
        if found is not None:
            return self._answer(key, found, "already exists")

        from hcloud.images import Image
        from hcloud.locations import Location
        from hcloud.server_types import ServerType
        from hcloud.servers import ServerCreatePublicNetwork
        from hcloud.ssh_keys import SSHKey

        image = self.config.get("HCLOUD_IMAGE", "ubuntu-24.04")
        ssh_key_id = self._ssh_key(public_key, fingerprint)
        kwargs: dict[str, Any] = {
            "name": name,
            "server_type": ServerType(name=self.config.get("HCLOUD_SERVER_TYPE", "cx22")),
            "image": Image(id=int(image)) if image.isdigit() else Image(name=image),
            "ssh_keys": [SSHKey(id=ssh_key_id)],
            "labels": stored,
            "start_after_create": True,
        }
        if self.config.get("HCLOUD_LOCATION"):
            kwargs["location"] = Location(name=self.config.get("HCLOUD_LOCATION"))
        if user_data is not None:
            kwargs["user_data"] = user_data
        ipv4 = truthy("HCLOUD_PUBLIC_IPV4", self.config.env.get("HCLOUD_PUBLIC_IPV4"), True)
        ipv6 = truthy("HCLOUD_PUBLIC_IPV6", self.config.env.get("HCLOUD_PUBLIC_IPV6"), True)
        if not (ipv4 and ipv6):
            kwargs["public_net"] = ServerCreatePublicNetwork(enable_ipv4=ipv4, enable_ipv6=ipv6)
        networks = self.config.ids("HCLOUD_NETWORKS")
        if networks:
            from hcloud.networks import Network

            kwargs["networks"] = [Network(id=n) for n in networks]
        firewalls = self.config.ids("HCLOUD_FIREWALLS")
        if firewalls:
            from hcloud.firewalls import Firewall

            kwargs["firewalls"] = [Firewall(id=f) for f in firewalls]
        placement = self.config.ids("HCLOUD_PLACEMENT_GROUP")
        if placement:
            from hcloud.placement_groups import PlacementGroup

            kwargs["placement_group"] = PlacementGroup(id=placement[0])
        if not networks and self.config.address_kind == "private":
            permanent("HCLOUD_ADDRESS=private needs HCLOUD_NETWORKS")

        log(f"creating server {name} for key {key}")
        try:
            created = self.client.servers.create(**kwargs)
        except Exception as error:  # noqa: BLE001
            from hcloud import APIException

            if isinstance(error, APIException) and error.code == "uniqueness_error":
                # A server of this name was made meanwhile (a create that timed out, or a
                # concurrent one): answer it when it carries our key.
                again = self._find(selector(all_labels), name)
                if again is not None:
                    return self._answer(key, again, "was made meanwhile")
            raise translate(error, f"create {name}") from error
        server = created.server
        log(f"server {server.id} ({name}) is {server.status}")
        state = state_of(server)
        return {"machines": [{"key": key, "id": str(server.id), "state": state if state in ("creating", "running") else "creating"}]}

    def _answer(self, key: str, server: Any, why: str) -> dict[str, Any]:
        log(f"server {server.id} ({server.name}) for key {key} {why} ({server.status})")
        return {"machines": [{"key": key, "id": str(server.id), "state": state_of(server)}]}

    def _find(self, label_selector: str, name: str) -> Any | None:
        try:
            servers = self.client.servers.get_all(label_selector=label_selector)
        except Exception as error:  # noqa: BLE001
            raise translate(error, "look up by key") from error
        live = [s for s in servers if s.status != "deleting"]
        if not live:
            # A server of our name without our labels is not ours to answer.
            return None
        live.sort(key=lambda s: (s.name != name, s.id))
        return live[0]

    def _ssh_key(self, public_key: str, fingerprint: str) -> int:
        """The id of the Hetzner SSH key object for this public key, registering it if needed."""
        from hcloud import APIException

        try:
            existing = self.client.ssh_keys.get_by_fingerprint(fingerprint)
            if existing is not None:
                return int(existing.id)
            name = "autoscaler-" + fingerprint.replace(":", "")[:16]
            log(f"registering SSH key {fingerprint} as {name}")
            try:
                return int(self.client.ssh_keys.create(
                    name=name, public_key=public_key, labels={"managed-by": "gitlab-runner-autoscaler"}).id)
            except APIException as error:
                if error.code != "uniqueness_error":
                    raise
                existing = self.client.ssh_keys.get_by_fingerprint(fingerprint)
                if existing is None:
                    raise
                return int(existing.id)
        except Exception as error:  # noqa: BLE001
            raise translate(error, "ssh key") from error

    # -- list --

    def list(self, request: dict[str, Any]) -> dict[str, Any]:
        want = request.get("labels") or {}
        if not isinstance(want, dict) or not all(isinstance(v, str) for v in want.values()):
            permanent("labels must be an object of strings")
        try:
            # get_all follows meta.pagination.next_page until the last page.
            servers = self.client.servers.get_all(label_selector=selector(want) if want else None)
        except Exception as error:  # noqa: BLE001
            raise translate(error, "list") from error
        machines = []
        for server in servers:
            labels = decoded_labels(server.labels)
            if all(labels.get(k) == v for k, v in want.items()):
                machines.append({"id": str(server.id), "state": state_of(server), "labels": labels})
        return {"machines": machines}

    # -- status --

    def status(self, machine_id: str) -> dict[str, Any]:
        if not re.fullmatch(r"[1-9][0-9]{0,18}", machine_id):
            return {"id": machine_id, "state": "gone"}  # not a Hetzner server id
        try:
            server = self.client.servers.get_by_id(int(machine_id))
        except Exception as error:  # noqa: BLE001
            if is_not_found(error):
                return {"id": machine_id, "state": "gone"}
            raise translate(error, f"get server {machine_id}") from error
        state = state_of(server)
        response: dict[str, Any] = {"id": machine_id, "state": state, "labels": decoded_labels(server.labels)}
        if state == "running":
            address = address_of(server, self.config.address_kind)
            if address is None:
                response["state"] = "creating"
                response["message"] = f"running but without a {self.config.address_kind} address yet"
            else:
                response.update(address=address, port=22, user=self.config.ssh_user)
        elif state in ("stopping", "failed"):
            response["message"] = f"server is {server.status}"
        return response

    # -- destroy --

    def destroy(self, machine_id: str) -> dict[str, Any]:
        if not re.fullmatch(r"[1-9][0-9]{0,18}", machine_id):
            return {"id": machine_id, "state": "gone"}
        from hcloud.servers import Server

        try:
            self.client.servers.delete(Server(id=int(machine_id)))
        except Exception as error:  # noqa: BLE001
            if is_not_found(error):
                return {"id": machine_id, "state": "gone"}
            raise translate(error, f"delete server {machine_id}") from error
        log(f"deleting server {machine_id}")
        # Deletion is an action that completes shortly; status says "gone" once it has.
        return {"id": machine_id, "state": "stopping"}
