"""The aws provisioner's code, by concern; ../provisioner is the executable that runs it, and its
docstring says how the protocol maps onto EC2.

    errors      exit codes, ProvisionerError, stderr logging with secrets scrubbed
    config      the settings (environment variables), each read when first needed
    user_data   the cloud-init user data that authorises the autoscaler's SSH key
    host_key    the SSH host key cloud-init printed to the console
    instances   EC2 instance descriptions in the protocol's words (states, tags, spot reclaims)
    cloud       the boto3 EC2 client, its failures turned into protocol exit codes
    verbs       Provisioner: info, create, list, status, destroy, stop, start
    main        the request on stdin, the verb in argv, the response on stdout
"""

NAME = "aws"
VERSION = "1.0.0"
