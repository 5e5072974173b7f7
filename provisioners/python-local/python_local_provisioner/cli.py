"""The command line: one request on stdin, one response on stdout, a protocol exit code."""

from __future__ import annotations

import json
import os
import sys
from typing import Any

from .common import EX_ERROR, ProvisionerError, log, permanent
from .config import Config
from .provisioner import Provisioner


# --- main -----------------------------------------------------------------------------------------


def parse_request(raw: bytes) -> dict[str, Any]:
    """The whole of stdin must be exactly one JSON object."""
    try:
        request = json.loads(raw)
    except ValueError:
        permanent("the request on stdin is not one JSON object")
    if not isinstance(request, dict):
        permanent("the request on stdin is not one JSON object")
    if request.get("protocol", 1) != 1:
        permanent(f"unsupported protocol {request.get('protocol')!r} (this provisioner speaks 1)")
    return request


def run(argv: list[str]) -> dict[str, Any]:
    raw = sys.stdin.buffer.read()
    verb = argv[1] if len(argv) > 1 else ""
    request = parse_request(raw)
    provisioner = Provisioner(Config(dict(os.environ)))
    if verb in ("info", "create", "list"):
        return getattr(provisioner, verb)(request)
    if verb in ("status", "destroy"):
        if len(argv) < 3 or not argv[2]:
            permanent(f"{verb} needs a machine id as its second argument")
        return getattr(provisioner, verb)(argv[2])
    permanent(f"unknown verb {verb!r} (expected info, create, list, status ID or destroy ID)")


def main(argv: list[str]) -> int:
    os.umask(0o077)  # sandboxes hold private keys
    try:
        response, code = run(argv), 0
    except ProvisionerError as error:
        log(f"error: {error.message}")
        response, code = error.response(), error.code
    except Exception as error:  # a bug or an unexpected OS failure: the autoscaler retries
        import traceback

        log(traceback.format_exc())
        response, code = {"error": f"{type(error).__name__}: {error}"}, EX_ERROR
    sys.stdout.write(json.dumps(response, separators=(",", ":")) + "\n")
    sys.stdout.flush()
    return code
