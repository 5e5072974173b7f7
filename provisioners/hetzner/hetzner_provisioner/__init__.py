"""The hetzner provisioner's code, split by concern; the entry script `provisioner` beside this
package runs main.main and its docstring describes the program.

    errors      exit codes, ProvisionerError, log, and Hetzner API errors as protocol errors
    labels      labels as Hetzner can hold them, and the SSH key's fingerprint
    config      the settings (HCLOUD_*) and server names
    verbs       the hcloud client and the protocol verbs
    main        the request on stdin, the answer on stdout, the exit code, the token masked

hcloud (and requests) are imported inside the functions that use them, so that `info` works
without them and a missing library is answered with exit 78 (see main).
"""
