"""The EC2 client: boto3, imported lazily, with EC2's failures turned into protocol exit codes."""

from __future__ import annotations

import sys
from typing import Any, Iterable, NoReturn

from . import VERSION
from .config import Config, number
from .errors import EX_CONFIG, EX_ERROR, EX_TEMPFAIL, ProvisionerError, log, one_line, permanent
from .host_key import decode_console, host_key_from_console
from .instances import interruption_of, is_spot

# EC2 error codes. Capacity errors on a spot launch trigger the on-demand fallback.
THROTTLE_CODES = {
    "RequestLimitExceeded", "Throttling", "ThrottlingException", "RequestThrottled",
    "RequestThrottledException", "TooManyRequestsException", "SlowDown",
}
CAPACITY_CODES = {
    "InsufficientInstanceCapacity", "InsufficientCapacity", "InsufficientHostCapacity",
    "InsufficientReservedInstanceCapacity", "InsufficientFreeAddressesInSubnet",
    "SpotMaxPriceTooLow", "MaxSpotInstanceCountExceeded", "InsufficientCapacityOnHost",
}
# What EC2 answers a spot launch when there is no spot here, now: under spot-with-fallback the
# launch is repeated on-demand, whatever exit code the refusal would have had alone (a 78 would
# pause the pool). Capacity: on-demand draws on other capacity. SpotMaxPriceTooLow: the spot
# price is above AWS_SPOT_MAX_PRICE, which on-demand does not use. MaxSpotInstanceCountExceeded:
# the spot vCPU quota, separate from the on-demand one. Unsupported and UnsupportedOperation:
# spot is not offered for this instance type, zone or tenancy, which on-demand may be. If the
# on-demand launch is refused as well, its own error is the answer.
# Left out: InsufficientFreeAddressesInSubnet (the subnet is full for both markets), throttling
# and quotas shared by both, and every error about the request itself (Invalid*, auth).
SPOT_FALLBACK_CODES = (CAPACITY_CODES - {"InsufficientFreeAddressesInSubnet"}) | {
    "Unsupported", "UnsupportedOperation",
}
QUOTA_CODES = {"InstanceLimitExceeded", "VcpuLimitExceeded", "ResourceLimitExceeded"}
UNAVAILABLE_CODES = {
    "Unavailable", "ServiceUnavailable", "InternalError", "InternalFailure", "RequestTimeout",
    "RequestTimeoutException", "RequestExpired", "PriorRequestNotComplete",
}
PERMANENT_CODES = {
    "AuthFailure", "UnauthorizedOperation", "AccessDenied", "AccessDeniedException",
    "InvalidClientTokenId", "SignatureDoesNotMatch", "IncompleteSignature", "MissingAuthenticationToken",
    "ExpiredToken", "ExpiredTokenException", "OptInRequired", "Blocked", "PendingVerification",
    "UnsupportedOperation", "Unsupported", "MissingParameter", "IdempotentParameterMismatch",
    "ValidationError", "UnknownParameter",
}
PERMANENT_PREFIXES = ("Invalid", "Malformed", "Missing", "Unauthorized")


class Cloud:
    """A thin layer over the boto3 EC2 client that turns failures into ProvisionerErrors."""

    def __init__(self, config: Config) -> None:
        try:
            import boto3
            import botocore.config
            import botocore.exceptions
        except ImportError:
            permanent(
                f"boto3 is not installed for {sys.executable} "
                "(pip install -r requirements.txt next to this provisioner)"
            )
        self.exceptions = botocore.exceptions
        self.config = config
        env = config.env
        attempts = number(env, "AWS_MAX_ATTEMPTS", 2, 1, 10)
        try:
            # AWS_REGION wins over AWS_DEFAULT_REGION, as in the other AWS SDKs.
            session = boto3.session.Session(region_name=(env.get("AWS_REGION") or "").strip() or None)
        except botocore.exceptions.BotoCoreError as error:
            permanent(f"AWS configuration: {one_line(error)}")
        self.session = session
        self.region = session.region_name
        if not self.region:
            permanent("no AWS region: set AWS_REGION (or AWS_DEFAULT_REGION, or a profile's region)")
        client_config = botocore.config.Config(
            retries={"total_max_attempts": attempts, "mode": "standard"},
            connect_timeout=number(env, "AWS_CONNECT_TIMEOUT", 5, 1, 120),
            read_timeout=number(env, "AWS_READ_TIMEOUT", 30, 1, 300),
            user_agent_extra=f"gitlab-runner-autoscaler-provisioner/{VERSION}",
        )
        try:
            self.ec2 = session.client("ec2", config=client_config)
        except botocore.exceptions.BotoCoreError as error:
            self.fail("client", error)

    def pages(self, operation: str, key: str, **params: Any) -> Iterable[dict[str, Any]]:
        try:
            paginator = self.ec2.get_paginator(operation)
            for page in paginator.paginate(**params):
                yield from page.get(key) or []
        except ProvisionerError:
            raise
        except Exception as error:  # noqa: BLE001
            self.fail(operation, error)

    def error_code(self, error: Exception) -> str | None:
        if isinstance(error, self.exceptions.ClientError):
            return error.response.get("Error", {}).get("Code") or None
        return None

    def fail(self, operation: str, error: Exception) -> NoReturn:
        """Raise error as a ProvisionerError with the protocol's exit code."""
        ex = self.exceptions
        if isinstance(error, ProvisionerError):
            raise error
        if isinstance(error, ex.ClientError):
            info = error.response.get("Error", {})
            code = info.get("Code") or "Unknown"
            status = error.response.get("ResponseMetadata", {}).get("HTTPStatusCode") or 0
            text = f"EC2 {operation}: {code}: {one_line(info.get('Message') or '')}".rstrip(": ")
            if code in THROTTLE_CODES:
                raise ProvisionerError(EX_TEMPFAIL, text, 10)
            if code in CAPACITY_CODES:
                raise ProvisionerError(EX_TEMPFAIL, text, 60)
            if code in QUOTA_CODES:
                raise ProvisionerError(EX_TEMPFAIL, text, 300)
            if code in UNAVAILABLE_CODES or status >= 500:
                raise ProvisionerError(EX_TEMPFAIL, text, 15)
            if code in PERMANENT_CODES or code.startswith(PERMANENT_PREFIXES) or status in (401, 403):
                raise ProvisionerError(EX_CONFIG, text)
            raise ProvisionerError(EX_ERROR, text)
        if isinstance(error, (ex.NoCredentialsError, ex.PartialCredentialsError, ex.NoRegionError,
                              ex.InvalidRegionError, ex.ProfileNotFound, ex.ParamValidationError,
                              ex.InvalidEndpointConfigurationError, ex.UnknownServiceError)):
            raise ProvisionerError(EX_CONFIG, f"EC2 {operation}: {type(error).__name__}: {one_line(error)}")
        if isinstance(error, ex.EndpointConnectionError):
            custom = self.config.env.get("AWS_ENDPOINT_URL_EC2") or self.config.env.get("AWS_ENDPOINT_URL")
            if not custom and self.region not in self.session.get_available_regions("ec2"):
                raise ProvisionerError(EX_CONFIG, f"EC2 {operation}: unknown region {self.region!r} ({one_line(error)})")
            raise ProvisionerError(EX_TEMPFAIL, f"EC2 {operation}: cannot reach the endpoint: {one_line(error)}", 15)
        if isinstance(error, (ex.ConnectionError, ex.ReadTimeoutError, ex.ConnectTimeoutError)):
            raise ProvisionerError(EX_TEMPFAIL, f"EC2 {operation}: {type(error).__name__}: {one_line(error)}", 15)
        if isinstance(error, ex.BotoCoreError):
            raise ProvisionerError(EX_ERROR, f"EC2 {operation}: {type(error).__name__}: {one_line(error)}")
        raise error

    # --- queries

    def instances(self, filters: list[dict[str, Any]]) -> list[dict[str, Any]]:
        found = []
        for reservation in self.pages(
            "describe_instances", "Reservations", Filters=filters,
            PaginationConfig={"PageSize": self.config.page_size},
        ):
            found.extend(reservation.get("Instances") or [])
        return found

    def instance(self, instance_id: str) -> dict[str, Any] | None:
        """The instance, or None when EC2 does not know it."""
        try:
            answer = self.ec2.describe_instances(InstanceIds=[instance_id])
        except Exception as error:  # noqa: BLE001
            if self.error_code(error) in ("InvalidInstanceID.NotFound", "InvalidInstanceID.Malformed"):
                return None
            self.fail("describe_instances", error)
        for reservation in answer.get("Reservations") or []:
            for instance in reservation.get("Instances") or []:
                if instance.get("InstanceId") == instance_id:
                    return instance
        return None

    def interruptions(self, instances: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
        """instance id -> interruption object, for the spot instances EC2 is reclaiming. A failure
        here (no permission for DescribeSpotInstanceRequests, say) only loses the report."""
        spot = [i["InstanceId"] for i in instances if is_spot(i)]
        result: dict[str, dict[str, Any]] = {}
        for start in range(0, len(spot), 100):
            chunk = spot[start: start + 100]
            try:
                paginator = self.ec2.get_paginator("describe_spot_instance_requests")
                for page in paginator.paginate(Filters=[{"Name": "instance-id", "Values": chunk}]):
                    for request in page.get("SpotInstanceRequests") or []:
                        found = interruption_of(request)
                        if found and request.get("InstanceId") in chunk:
                            result[request["InstanceId"]] = found
            except Exception as error:  # noqa: BLE001
                code = self.error_code(error) or type(error).__name__
                log(f"cannot read spot request status ({code}); no interruption report this time")
                break
        return result

    def console_host_key(self, instance_id: str) -> str | None:
        try:
            answer = self.ec2.get_console_output(InstanceId=instance_id)
        except Exception as error:  # noqa: BLE001
            code = self.error_code(error) or type(error).__name__
            log(f"cannot read the console output of {instance_id} ({code}); no host key")
            return None
        output = answer.get("Output") or ""
        return host_key_from_console(decode_console(output)) if output else None
