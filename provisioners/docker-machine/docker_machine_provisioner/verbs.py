"""The protocol verbs: info, create, list, status, stop, start and destroy."""

from __future__ import annotations

import contextlib
import datetime
import re
import shlex
from typing import Any, NoReturn

from .config import Config
from .errors import EX_TEMPFAIL, ProvisionerError, log, permanent
from .machine import Machine, failure
from .sidecar import Sidecar

NAME = "docker-machine"
VERSION = "1.0.0"

PUBLIC_KEY_RE = re.compile(r"(ssh-ed25519|ssh-rsa|ecdsa-sha2-nistp(256|384|521)) [A-Za-z0-9+/=]+( [^\n]*)?")

# docker-machine states -> protocol states. "Starting" outside a create (whose lock says
# "creating" first) is a `docker-machine start` under way.
STATES = {
    "Running": "running",
    "Starting": "starting",
    "None": "creating",
    "": "creating",
    "Stopping": "stopping",
    "Stopped": "stopped",
    "Paused": "failed",
    "Saved": "failed",
    "Error": "failed",
    "Timeout": "failed",
}


# --- the provisioner ------------------------------------------------------------------------------


class Provisioner:
    def __init__(self, config: Config) -> None:
        self.config = config
        self.machine = Machine(config)

    def info(self, request: dict[str, Any]) -> dict[str, Any]:
        return {
            "protocol": 1, "name": NAME, "version": VERSION,
            "capabilities": {"batch_create": False, "max_batch": 1, "host_key": False, "stop_start": True},
        }

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
        public_key = public_key.strip()
        user_data = request.get("user_data")
        if user_data is not None and not isinstance(user_data, str):
            permanent("user_data must be a string or null")
        driver = self.config.driver
        self.config.binary  # noqa: B018 - fail early (78) when docker-machine is missing

        name = self.config.machine_name(key)
        self.config.state_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        sidecar = Sidecar(self.config, name)
        with sidecar.locked() as mine:
            if not mine:
                log(f"machine {name} for key {key} is being created by another call")
                return {"machines": [{"key": key, "id": name, "state": "creating"}]}
            state = self.machine.status(name)
            if state == "Running":
                log(f"machine {name} for key {key} already exists")
                if sidecar.read() is None:
                    sidecar.write(self._record(name, key, labels, driver))
                self._authorize(name, public_key)
                return {"machines": [{"key": key, "id": name, "state": "running"}]}
            if state is not None:
                # Half made by a create that was killed, or broken since: start over.
                log(f"machine {name} for key {key} exists but is {state or 'in no state'}; removing it to start over")
                self.machine.remove(name)
            sidecar.write(self._record(name, key, labels, driver))
            args = ["create", "--driver", driver, *self.config.options]
            option = (self.config.env.get("DOCKER_MACHINE_USER_DATA_OPTION") or "").strip().lstrip("-")
            if user_data is not None and option:
                sidecar.user_data.write_text(user_data)
                args.append(f"--{option}={sidecar.user_data}")
            elif user_data is not None:
                log("user_data is ignored: set DOCKER_MACHINE_USER_DATA_OPTION to the driver's user-data option")
            args.append(name)
            log(f"creating machine {name} for key {key} (driver {driver}, {len(self.config.options)} options)")
            done = self.machine.run(args, timeout=self.config.timeout("DOCKER_MACHINE_CREATE_TIMEOUT", 280))
            if done.returncode != 0:
                error = failure("create", name, done)
                log(f"machine {name} could not be created; removing what was made")
                with contextlib.suppress(ProvisionerError):
                    self.machine.remove(name)
                sidecar.remove()
                raise error
            self._authorize(name, public_key)
        log(f"machine {name} is running")
        return {"machines": [{"key": key, "id": name, "state": "running"}]}

    def _record(self, name: str, key: str, labels: dict[str, str], driver: str) -> dict[str, Any]:
        return {"name": name, "key": key, "pool": self.config.pool, "labels": labels, "driver": driver,
                "created": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")}

    def _authorize(self, name: str, public_key: str) -> None:
        """Adds the autoscaler's key to the login user's authorized_keys (once)."""
        quoted = shlex.quote(public_key)
        script = ("umask 077; mkdir -p ~/.ssh && touch ~/.ssh/authorized_keys && "
                  f"(grep -qxF {quoted} ~/.ssh/authorized_keys || echo {quoted} >> ~/.ssh/authorized_keys)")
        done = self.machine.run(["ssh", name, script], timeout=120)
        if done.returncode != 0:
            raise failure("ssh", name, done)

    def list(self, request: dict[str, Any]) -> dict[str, Any]:
        want = request.get("labels") or {}
        if not isinstance(want, dict) or not all(isinstance(v, str) for v in want.values()):
            permanent("labels must be an object of strings")
        listed = self.machine.ls()
        names = set(listed)
        if self.config.state_dir.is_dir():
            names |= {p.stem for p in self.config.state_dir.glob("*.json")}
        machines = []
        for name in sorted(names):
            sidecar = Sidecar(self.config, name)
            labels = sidecar.labels()
            if not all(labels.get(k) == v for k, v in want.items()):
                continue
            if sidecar.creating():
                state = "creating"
            elif name in listed:
                state = STATES.get(listed[name], "failed")
            else:
                continue  # a state file without a machine: gone
            machines.append({"id": name, "state": state, "labels": labels})
        return {"machines": machines}

    def status(self, machine_id: str) -> dict[str, Any]:
        if not self.config.is_ours(machine_id):
            return {"id": machine_id, "state": "gone"}
        sidecar = Sidecar(self.config, machine_id)
        labels = sidecar.labels()
        if sidecar.creating():
            return {"id": machine_id, "state": "creating", "labels": labels}
        state = self.machine.status(machine_id)
        if state is None:
            return {"id": machine_id, "state": "gone"}
        response: dict[str, Any] = {"id": machine_id, "state": STATES.get(state, "failed"), "labels": labels}
        if response["state"] == "running":
            address = self.machine.ip(machine_id)
            driver = self.machine.inspect(machine_id).get("Driver") or {}
            if not address:
                address = driver.get("IPAddress") or None
            if not address:
                response.update(state="creating", message="running, but docker-machine reports no IP address yet")
                return response
            port = driver.get("SSHPort") or 22
            user = self.config.env.get("DOCKER_MACHINE_SSH_USER") or driver.get("SSHUser") or "root"
            response.update(address=address, port=int(port), user=user)
        elif response["state"] in ("failed", "stopping", "stopped"):
            response["message"] = f"docker-machine reports the machine {state}"
        return response

    def stop(self, machine_id: str) -> dict[str, Any]:
        state = self.power_state(machine_id)
        if state in ("gone", "stopped", "stopping"):
            return {"id": machine_id, "state": state}
        if state not in ("running", "starting"):
            refuse_power("stop", machine_id, state)
        log(f"stopping machine {machine_id}")
        self.power("stop", machine_id, "DOCKER_MACHINE_STOP_TIMEOUT")
        return {"id": machine_id, "state": "stopped"}

    def start(self, machine_id: str) -> dict[str, Any]:
        state = self.power_state(machine_id)
        if state in ("gone", "running", "starting"):
            return {"id": machine_id, "state": state}
        if state != "stopped":
            refuse_power("start", machine_id, state)
        log(f"starting machine {machine_id}")
        # Its address may change; status asks docker-machine for it again.
        self.power("start", machine_id, "DOCKER_MACHINE_START_TIMEOUT")
        return {"id": machine_id, "state": "running"}

    def power_state(self, machine_id: str) -> str:
        """The machine's protocol state, for stop and start."""
        if not self.config.is_ours(machine_id):
            return "gone"
        if Sidecar(self.config, machine_id).creating():
            return "creating"
        state = self.machine.status(machine_id)
        return "gone" if state is None else STATES.get(state, "failed")

    def power(self, verb: str, machine_id: str, timeout_setting: str) -> None:
        """docker-machine stop or start, which return once the machine is stopped or running."""
        done = self.machine.run([verb, machine_id], timeout=self.config.timeout(timeout_setting, 240))
        if done.returncode != 0:
            raise failure(verb, machine_id, done)

    def destroy(self, machine_id: str) -> dict[str, Any]:
        if not self.config.is_ours(machine_id):
            return {"id": machine_id, "state": "gone"}
        sidecar = Sidecar(self.config, machine_id)
        log(f"removing machine {machine_id}")
        self.machine.remove(machine_id)
        sidecar.remove()
        return {"id": machine_id, "state": "gone"}


def refuse_power(verb: str, machine_id: str, state: str) -> NoReturn:
    """A machine still being made may take the verb later (75); a broken one never (78)."""
    if state == "failed":
        permanent(f"machine {machine_id} is in a state docker-machine cannot {verb} it from: destroy it")
    raise ProvisionerError(EX_TEMPFAIL, f"machine {machine_id} is {state}; {verb} it once that is over", 15)
