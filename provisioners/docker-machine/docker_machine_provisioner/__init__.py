"""The docker-machine provisioner's code, split by concern; the entry script `provisioner` beside
this package runs main.main and its docstring describes the program.

    errors      exit codes, ProvisionerError, log and the masking of secrets
    config      the settings (DOCKER_MACHINE_*), machine names and the name template
    machine     the docker-machine command, and its failures as protocol errors
    sidecar     the state files: labels and the create lock of each machine
    verbs       the protocol verbs
    main        the request on stdin, the answer on stdout, the exit code
"""
