"""One call: the request on stdin, the verb in argv, the response on stdout, the exit code."""

from __future__ import annotations

import json
import os
import sys
from typing import Any

from .config import Config
from .errors import EX_ERROR, ProvisionerError, log, one_line, permanent
from .verbs import Provisioner


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
    if verb in ("status", "destroy", "stop", "start"):
        if len(argv) < 3 or not argv[2]:
            permanent(f"{verb} needs a machine id as its second argument")
        return getattr(provisioner, verb)(argv[2])
    permanent(f"unknown verb {verb!r} (expected info, create, list, status ID, destroy ID, stop ID or start ID)")


def main(argv: list[str]) -> int:
    try:
        response, code = run(argv), 0
    except ProvisionerError as error:
        log(f"error: {error.message}")
        response, code = error.response(), error.code
    except Exception as error:  # a bug: the autoscaler retries; details go to stderr only
        import traceback

        log(traceback.format_exc())
        response, code = {"error": one_line(f"{type(error).__name__}: {error}")}, EX_ERROR
    sys.stdout.write(json.dumps(response, separators=(",", ":")) + "\n")
    sys.stdout.flush()
    return code
