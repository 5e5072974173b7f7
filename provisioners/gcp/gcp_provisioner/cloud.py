"""The Compute Engine clients and the calls that several verbs share: reading an instance,
following a zone operation, finding preemptions."""

from __future__ import annotations

import re
import time
from typing import Any

from .client import compute_api
from .config import Config
from .errors import log, permanent
from .translate import is_not_found, translate

CALL_TIMEOUT = 30.0  # seconds, one HTTP call


class Cloud:
    """The clients, made on first use (info needs none)."""

    def __init__(self, config: Config) -> None:
        self.config = config
        self._instances: Any = None
        self._operations: Any = None

    def _options(self) -> dict[str, Any]:
        from google.api_core.client_options import ClientOptions

        kwargs: dict[str, Any] = {"transport": "rest"}
        if self.config.endpoint:
            kwargs["client_options"] = ClientOptions(api_endpoint=self.config.endpoint)
        if self.config.anonymous:
            from google.auth.credentials import AnonymousCredentials

            kwargs["credentials"] = AnonymousCredentials()
        elif self.config.access_token:
            from google.oauth2.credentials import Credentials

            kwargs["credentials"] = Credentials(token=self.config.access_token)
        elif self.config.credentials_file:
            from google.oauth2 import service_account

            try:
                kwargs["credentials"] = service_account.Credentials.from_service_account_file(
                    self.config.credentials_file, scopes=["https://www.googleapis.com/auth/compute"]
                )
            except (OSError, ValueError) as error:
                permanent(f"GCE_CREDENTIALS_FILE cannot be read as a service account key: {type(error).__name__}")
        return kwargs

    @property
    def instances(self) -> Any:
        if self._instances is None:
            try:
                self._instances = compute_api().InstancesClient(**self._options())
            except Exception as error:  # noqa: BLE001 - credentials lookup
                raise translate(error, "connecting") from error
        return self._instances

    @property
    def operations(self) -> Any:
        # Our own client, so that it talks to the same endpoint as the instances client (the
        # library's built-in operation polling always uses the default endpoint).
        if self._operations is None:
            try:
                self._operations = compute_api().ZoneOperationsClient(**self._options())
            except Exception as error:  # noqa: BLE001
                raise translate(error, "connecting") from error
        return self._operations

    def get(self, name: str) -> Any | None:
        """The instance, or None when it does not exist."""
        try:
            return self.instances.get(
                project=self.config.project, zone=self.config.zone, instance=name,
                retry=None, timeout=CALL_TIMEOUT,
            )
        except Exception as error:  # noqa: BLE001
            if instance_is_missing(error, self.config, name):
                return None
            raise translate(error, f"get {name}") from error

    def wait(self, operation: Any, doing: str, budget: float) -> Any:
        """Polls a zone operation until DONE or `budget` seconds passed; returns the last view."""
        deadline = time.monotonic() + budget
        while not is_done(operation) and time.monotonic() < deadline:
            time.sleep(min(self.config.poll_interval, max(0.0, deadline - time.monotonic())))
            try:
                operation = self.operations.get(
                    project=self.config.project, zone=self.config.zone, operation=operation.name,
                    retry=None, timeout=CALL_TIMEOUT,
                )
            except Exception as error:  # noqa: BLE001
                raise translate(error, f"{doing}: polling operation {operation.name}") from error
        return operation

    def preempted_ids(self, instance_ids: set[str]) -> set[str]:
        """Which of these instances (by numeric id) GCE preempted, from the zone's operations."""
        if not instance_ids:
            return set()
        flt = '(operationType = "compute.instances.preempted")'
        if len(instance_ids) == 1:
            flt += f' AND (targetId = "{next(iter(instance_ids))}")'
        found: set[str] = set()
        try:
            pager = self.operations.list(
                request={"project": self.config.project, "zone": self.config.zone, "filter": flt,
                         "max_results": self.config.page_size},
                retry=None, timeout=CALL_TIMEOUT,
            )
            for op in pager:
                if str(op.target_id) in instance_ids:
                    found.add(str(op.target_id))
        except Exception as error:  # noqa: BLE001 - only a detail of the answer
            log(f"cannot read preemption operations: {type(error).__name__}: {getattr(error, 'message', error)}")
        return found


def is_done(operation: Any) -> bool:
    status = operation.status
    return getattr(status, "name", status) == "DONE"


NOT_FOUND_RESOURCE_RE = re.compile(r"The resource '([^']+)' was not found")


def _missing_resource(error: Exception) -> str | None:
    """The resource a GCE 404 says is missing, from the error's structured `errors[]` items
    (`{"reason": "notFound", "message": "The resource 'projects/P/zones/Z/instances/N' was not
    found"}`). Not from the exception's text: the client library starts that with the request
    URL, which names the instance whatever was missing."""
    for item in getattr(error, "errors", None) or ():
        if isinstance(item, dict) and item.get("reason") == "notFound":
            found = NOT_FOUND_RESOURCE_RE.search(str(item.get("message") or ""))
            if found:
                return found.group(1)
    return None


def instance_is_missing(error: Exception, config: Config, name: str) -> bool:
    """A 404 about this instance itself. A 404 about the zone or the project (a wrong GCE_ZONE or
    GCE_PROJECT), or one that names no resource, is not: answering `gone` then would make the
    autoscaler forget a machine that still runs and bills."""
    return is_not_found(error) and _missing_resource(error) == (
        f"projects/{config.project}/zones/{config.zone}/instances/{name}")
