"""The lazy import of Google's compute library (start-up time: see compute_api)."""

from __future__ import annotations

import sys
from typing import Any

_API: Any = None


def compute_api() -> Any:
    """The parts of google.cloud.compute_v1 this provisioner uses: InstancesClient,
    ZoneOperationsClient and the message types.

    The package's own __init__ imports all of its hundred-odd service clients, which doubles the
    start-up time every call pays. So the package is registered as an empty module (with its real
    path, so that its submodules load as usual) and only the two services are imported. If that
    fails, the package is imported the ordinary way."""
    global _API
    if _API is not None:
        return _API
    import importlib
    import importlib.util
    import types

    name = "google.cloud.compute_v1"
    try:
        if name not in sys.modules:
            spec = importlib.util.find_spec(name)
            if spec is None or not spec.submodule_search_locations:
                raise ImportError(f"No module named {name!r}", name=name)
            sys.modules[name] = importlib.util.module_from_spec(spec)
        instances = importlib.import_module(f"{name}.services.instances")
        operations = importlib.import_module(f"{name}.services.zone_operations")
        compute = importlib.import_module(f"{name}.types.compute")
        api = types.SimpleNamespace(**{k: getattr(compute, k) for k in dir(compute) if k[:1].isupper()})
        api.InstancesClient = instances.InstancesClient
        api.ZoneOperationsClient = operations.ZoneOperationsClient
    except ImportError as error:
        if error.name and error.name.startswith("google"):
            for module in [m for m in sys.modules if m == name or m.startswith(name + ".")]:
                del sys.modules[module]
            from google.cloud import compute_v1 as api  # raises the real ImportError if missing
        else:
            raise
    _API = api
    return api



