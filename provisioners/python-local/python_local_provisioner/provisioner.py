"""The verbs: info, create, list, status and destroy."""

from __future__ import annotations

import contextlib
import datetime
import os
import random
import re
import secrets
import subprocess
from typing import Any, Iterator

from .common import (
    BIND_ATTEMPTS,
    EX_ERROR,
    ID_RE,
    MAX_BATCH,
    NAME,
    PUBLIC_KEY_RE,
    VERSION,
    ProvisionerError,
    log,
    permanent,
    transient,
)
from .config import Config
from .locks import acquire, root_lock
from .processes import remove_tree, used_tcp_ports
from .sandbox import Sandbox


# --- the provisioner ------------------------------------------------------------------------------


class Provisioner:
    def __init__(self, config: Config) -> None:
        self.config = config

    def sandboxes(self) -> Iterator[tuple[Sandbox, dict[str, Any]]]:
        """Every machine under the root with readable metadata (skipping ones removed meanwhile)."""
        if not self.config.root.is_dir():
            return
        for entry in sorted(self.config.root.iterdir()):
            if entry.name.startswith(".") or not entry.is_dir():
                continue
            sandbox = Sandbox(self.config, entry.name)
            meta = sandbox.meta()
            if meta is not None:
                yield sandbox, meta

    def sandbox(self, machine_id: str) -> Sandbox | None:
        if not ID_RE.fullmatch(machine_id):
            return None  # not an id this provisioner makes, so certainly not a path to touch
        sandbox = Sandbox(self.config, machine_id)
        return sandbox if sandbox.dir.is_dir() else None

    # -- verbs --

    def info(self, request: dict[str, Any]) -> dict[str, Any]:
        return {
            "protocol": 1, "name": NAME, "version": VERSION,
            "capabilities": {"batch_create": True, "max_batch": MAX_BATCH, "host_key": True},
        }

    def create(self, request: dict[str, Any]) -> dict[str, Any]:
        # Validate the whole request before touching anything: a bad one fails the same way again.
        machines = request.get("machines")
        if not isinstance(machines, list) or not machines:
            permanent("machines must be a non-empty array")
        if len(machines) > MAX_BATCH:
            permanent(f"at most {MAX_BATCH} machines per create (max_batch)")
        wanted: list[tuple[str, dict[str, str]]] = []
        for i, machine in enumerate(machines):
            key = machine.get("key") if isinstance(machine, dict) else None
            labels = machine.get("labels", {}) if isinstance(machine, dict) else None
            if not isinstance(key, str) or not 1 <= len(key) <= 128:
                permanent(f"machines[{i}].key must be a string of 1 to 128 characters")
            if not isinstance(labels, dict) or not all(isinstance(v, str) for v in labels.values()):
                permanent(f"machines[{i}].labels must be an object of strings")
            wanted.append((key, labels))
        public_key = request.get("ssh_public_key")
        if not isinstance(public_key, str) or not PUBLIC_KEY_RE.fullmatch(public_key):
            permanent("ssh_public_key must be one OpenSSH public key line")
        if request.get("user_data") is not None:
            log("user_data is ignored by local sandboxes")

        ports = self.config.port_range()
        # The root goes into sshd_config, where whitespace and quotes split arguments and % starts a
        # token (AuthorizedKeysFile), and into ForceCommand, which a shell parses.
        if re.search(r"""[\s\x00-\x1f\x7f"'\\%#$`]""", str(self.config.root)):
            permanent(
                f"the sandbox root {str(self.config.root)!r} holds characters sshd_config cannot take "
                "(whitespace, quotes, \\, %, #, $ or `); set LOCAL_ROOT"
            )
        sshd = self.config.sshd()
        user = self.config.login_user()
        self.config.root.mkdir(mode=0o700, parents=True, exist_ok=True)

        # A batch that partly failed answers the machines it made (api-spec, "create").
        made: list[dict[str, Any]] = []
        first_error: ProvisionerError | None = None
        for key, labels in wanted:
            try:
                made.append(self.create_one(key, labels, public_key, ports, sshd, user))
            except ProvisionerError as error:
                log(f"key {key}: {error.message}")
                first_error = first_error or error
            except (OSError, subprocess.SubprocessError) as error:
                log(f"key {key}: {error}")
                first_error = first_error or ProvisionerError(EX_ERROR, f"key {key}: {error}")
        if not made and first_error is not None:
            raise first_error
        return {"machines": made}

    def create_one(
        self, key: str, labels: dict[str, str], public_key: str, ports: range, sshd: str, user: str
    ) -> dict[str, Any]:
        lock: int | None = None
        try:
            with root_lock(self.config):
                sandbox = self.find_by_key(key)
                if sandbox is not None:
                    state = sandbox.state()
                    log(f"machine {sandbox.id} already has key {key} ({state})")
                    if state in ("running", "creating"):
                        return {"key": key, "id": sandbox.id, "state": state}
                    # A create that was killed half-way, or an sshd that died: finish making it.
                    lock = acquire(sandbox.create_lock, 2)
                    if lock is None:
                        return {"key": key, "id": sandbox.id, "state": "creating"}
                    port = int((sandbox.meta() or {}).get("port") or self.pick_port(ports))
                else:
                    sandbox = Sandbox(self.config, f"pylocal-{secrets.token_hex(6)}")
                    sandbox.dir.mkdir(mode=0o700)
                    lock = acquire(sandbox.create_lock, 2)
                    port = self.pick_port(ports, cleanup=sandbox)
                    sandbox.write_meta({
                        "id": sandbox.id, "key": key, "pool": self.config.pool, "labels": labels,
                        "port": port, "user": user,
                        "created": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
                    })
                    log(f"creating machine {sandbox.id} for key {key} on port {port}")
            try:
                self.boot(sandbox, public_key, user, port, ports, sshd)
            except Exception:
                log(f"machine {sandbox.id} failed to start, removing it")
                with contextlib.suppress(Exception):
                    sandbox.destroy()
                raise
            log(f"machine {sandbox.id} is running")
            return {"key": key, "id": sandbox.id, "state": "running"}
        finally:
            if lock is not None:
                os.close(lock)

    def boot(self, sandbox: Sandbox, public_key: str, user: str, port: int, ports: range, sshd: str) -> None:
        """Write the sandbox's files and start its sshd, moving to another port when something
        else took ours."""
        sandbox.write_files(public_key, user, port)
        failed_ports: set[int] = set()
        for _ in range(BIND_ATTEMPTS):
            outcome, detail = sandbox.wait_ready(sandbox.start_sshd(sshd), port)
            if outcome == "ready":
                return
            if outcome == "failed":
                raise ProvisionerError(EX_ERROR, detail)
            if outcome == "no privsep dir":
                # Root's sshd chroots its pre-authentication child there; the service manager
                # usually creates it (systemd's RuntimeDirectory), but nothing has here.
                if os.getuid() != 0:
                    permanent(f"sshd's privilege separation directory {detail} is missing")
                os.makedirs(detail, mode=0o755, exist_ok=True)
                os.chmod(detail, 0o755)
                log(f"created sshd's privilege separation directory {detail}")
                continue
            # A socket that is bound but not listening shows nowhere until sshd tries.
            log(f"port {port} is taken, picking another")
            failed_ports.add(port)
            with root_lock(self.config):
                port = self.pick_port(ports, exclude=failed_ports)
                meta = sandbox.meta() or {}
                sandbox.write_meta({**meta, "port": port})
            sandbox.write_sshd_config(user, port)
        transient(f"no port could be bound after {BIND_ATTEMPTS} attempts")

    def find_by_key(self, key: str) -> Sandbox | None:
        """The machine created with this idempotency key (not one being destroyed)."""
        for sandbox, meta in self.sandboxes():
            if meta.get("key") == key and not sandbox.destroying.exists():
                return sandbox
        return None

    def pick_port(self, ports: range, cleanup: Sandbox | None = None, exclude: frozenset[int] | set[int] = frozenset()) -> int:
        """A free port of the range, from a random start. Call with the root lock held."""
        used = used_tcp_ports() | {int(meta.get("port") or 0) for _, meta in self.sandboxes()} | exclude
        start = random.randrange(len(ports))
        for i in range(len(ports)):
            port = ports[(start + i) % len(ports)]
            if port not in used:
                return port
        if cleanup is not None:
            remove_tree(cleanup.dir)
        transient(f"no free port in {ports.start}-{ports.stop - 1}")

    def list(self, request: dict[str, Any]) -> dict[str, Any]:
        want = request.get("labels") or {}
        if not isinstance(want, dict):
            permanent("labels must be an object")
        machines = []
        for sandbox, meta in self.sandboxes():
            labels = meta.get("labels") or {}
            if all(labels.get(k) == v for k, v in want.items()):
                state = sandbox.state()
                if state != "gone":
                    machines.append({"id": sandbox.id, "state": state, "labels": labels})
        return {"machines": machines}

    def status(self, machine_id: str) -> dict[str, Any]:
        sandbox = self.sandbox(machine_id)
        meta = sandbox.meta() if sandbox else None
        if sandbox is None or meta is None:
            return {"id": machine_id, "state": "gone"}
        state = sandbox.state()
        response: dict[str, Any] = {"id": machine_id, "state": state, "labels": meta.get("labels") or {}}
        if state == "running":
            response.update(address="127.0.0.1", port=meta["port"], user=meta["user"])
            host_key = sandbox.host_public_key()
            if host_key:
                response["host_key"] = host_key
        elif state == "failed":
            response["message"] = f"sshd of this sandbox is not running (see {sandbox.log})"
        return response

    def destroy(self, machine_id: str) -> dict[str, Any]:
        sandbox = self.sandbox(machine_id)
        if sandbox is not None:
            log(f"destroying machine {machine_id}")
            sandbox.destroy()
            log(f"machine {machine_id} is gone")
        return {"id": machine_id, "state": "gone"}
