"""The gcp provisioner's code, one module per concern; the executable is ../provisioner, whose
docstring describes the provisioner.

    errors        exit codes, the protocol's error answer, the log on stderr
    labels        the autoscaler's labels as GCE labels
    config        the settings (from the environment) and instance names
    translate     GCE's errors as protocol errors and exit codes
    client        the lazy import of Google's compute library
    cloud         the clients and the calls several verbs share
    instances     what an instance says: state, labels, metadata, address
    verbs         info, create, list, status, destroy, stop, start
    main          the request, the command line, the answer

Nothing here imports a Google module at import time: info needs none, and every other verb
imports only what it uses (see client.compute_api), because every call pays the start-up time.
"""
