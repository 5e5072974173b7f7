"""python-local provisioner: local sandboxes, written in Python (standard library only).

Each machine is a directory with its own OpenSSH sshd on a loopback port, its own host key and
its own authorized_keys; the same kind of machine as the bash `local` provisioner, implemented
independently to show that a provisioner can be written in any language.

Protocol (verbs, requests, responses, exit codes): api-spec/provisioner.md, version 1.
    provisioner info | create | list | status ID | destroy ID   (request JSON on stdin)

Settings (environment):
    LOCAL_ROOT        where sandboxes live
                      (default ${XDG_STATE_HOME:-$HOME/.local/state}/autoscaler-python-local/$AUTOSCALER_POOL)
    LOCAL_PORT_RANGE  loopback ports sshd may listen on (default 20000-39999)
    LOCAL_SSHD        sshd binary (default: sshd on PATH, else /usr/sbin/sshd, /usr/local/sbin/sshd, /sbin/sshd)

On disk, per machine (<root>/<id>/):
    machine.json   id, key, pool, labels, port, user, created
    ssh/           host key, authorized_keys, sshd_config, session (the ForceCommand wrapper)
    home/ tmp/     HOME and TMPDIR of every SSH command
    sshd.log sshd.pid
    create.lock    held (flock) while a create is making the machine: the machine is "creating"
    destroying     present once destroy started: the machine is "stopping"
and <root>/.lock serialises key lookups, port choices and directory removal.

Processes of a machine: every SSH command runs through ssh/session, which exports
AUTOSCALER_LOCAL_MACHINE=<id>; children inherit it, even daemons that detach with setsid or nohup,
so destroy finds them in /proc/*/environ. sshd's own processes (listener and per-connection
children) overwrite their environment with their process title, so destroy finds those by the
sshd.log they all hold open.

Layout: ../provisioner is the executable entry point; this package holds the code, one module per
concern: common (constants, the protocol error, the log), config (settings from the environment),
locks (flock helpers), processes (/proc, ports, tree removal), sandbox (one machine on disk and its
sshd), provisioner (the verbs) and cli (request parsing, dispatch, the response and exit code).
"""
