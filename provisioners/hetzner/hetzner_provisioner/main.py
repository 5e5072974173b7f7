"""One call: the verb from the command line, the request from stdin, the answer on stdout."""

from __future__ import annotations

import json
import os
import sys
from typing import Any

from .config import Config
from .errors import EX_CONFIG, EX_ERROR, ProvisionerError, log, permanent
from .verbs import Provisioner


# --- main -----------------------------------------------------------------------------------------


def parse_request(raw: bytes) -> dict[str, Any]:
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
    if verb not in ("info", "create", "list", "status", "destroy"):
        permanent(f"unknown verb {verb!r} (expected info, create, list, status ID or destroy ID)")
    request = parse_request(raw)
    provisioner = Provisioner(Config(dict(os.environ)))
    if verb in ("status", "destroy"):
        if len(argv) < 3 or not argv[2]:
            permanent(f"{verb} needs a machine id as its second argument")
        return getattr(provisioner, verb)(argv[2])
    return getattr(provisioner, verb)(request)


def scrub(text: str) -> str:
    """Never let the token reach a log line or a response."""
    token = (os.environ.get("HCLOUD_TOKEN") or "").strip()
    return text.replace(token, "[token]") if len(token) >= 4 else text


def main(argv: list[str]) -> int:
    try:
        response, code = run(argv), 0
    except ProvisionerError as error:
        error.message = scrub(error.message)
        log(f"error: {error.message}")
        response, code = error.response(), error.code
    except ImportError as error:
        response, code = {"error": f"a library is missing ({error.name}): pip install -r requirements.txt"}, EX_CONFIG
        log(response["error"])
    except Exception as error:  # a bug or an unexpected failure: the autoscaler retries
        message = scrub(" ".join(f"{type(error).__name__}: {error}".split()))
        log(f"unexpected error: {message}")
        response, code = {"error": message}, EX_ERROR
    sys.stdout.write(json.dumps(response, separators=(",", ":")) + "\n")
    sys.stdout.flush()
    return code
