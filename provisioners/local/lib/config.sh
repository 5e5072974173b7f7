# shellcheck shell=bash
# Sourced by ../provisioner: the settings (environment) and what this host must provide.

# --- configuration ---------------------------------------------------------------------------

configure() {
	# The autoscaler's clean environment may lack HOME; the passwd entry has it.
	if [[ -z ${HOME:-} ]]; then
		HOME=$(getent passwd "$(id -u)" | cut -d: -f6 || true)
		[[ -n $HOME ]] || fail 78 "HOME is not set and uid $(id -u) has no passwd entry; set LOCAL_ROOT"
	fi
	POOL=${AUTOSCALER_POOL:-default}
	[[ $POOL =~ ^[a-z0-9][a-z0-9_-]{0,62}$ ]] || fail 78 "invalid AUTOSCALER_POOL '$POOL'"
	local root=${LOCAL_ROOT:-${XDG_STATE_HOME:-$HOME/.local/state}/autoscaler-local/$POOL}
	# Canonical, because destroy compares it with /proc/*/fd link targets and sshd command lines.
	ROOT=$(realpath -m -- "$root")
}

# configure_ports: LOCAL_PORT_RANGE, needed by create only (a bad range must not block destroy).
configure_ports() {
	local range=${LOCAL_PORT_RANGE:-20000-39999}
	[[ $range =~ ^([0-9]{1,5})-([0-9]{1,5})$ ]] || fail 78 "invalid LOCAL_PORT_RANGE '$range' (want LOW-HIGH)"
	PORT_LOW=$((10#${BASH_REMATCH[1]}))
	PORT_HIGH=$((10#${BASH_REMATCH[2]}))
	((1 <= PORT_LOW && PORT_LOW <= PORT_HIGH && PORT_HIGH <= 65535)) ||
		fail 78 "invalid LOCAL_PORT_RANGE '$range' (want 1 <= LOW <= HIGH <= 65535)"
}

# find_sshd: sets SSHD to an absolute path (sshd refuses to run otherwise).
find_sshd() {
	local candidate
	for candidate in "${LOCAL_SSHD:-}" "$(command -v sshd || true)" /usr/sbin/sshd /usr/local/sbin/sshd /sbin/sshd; do
		if [[ -n $candidate && -x $candidate ]]; then
			SSHD=$(realpath -- "$candidate")
			return 0
		fi
	done
	fail 78 "openssh-server is not installed (no sshd found; set LOCAL_SSHD to its path)"
}

# check_login_user: sshd logs in as the current user and runs every command through that user's
# login shell, so the user needs a passwd entry and a real shell.
check_login_user() {
	local entry shell
	entry=$(getent passwd "$(id -u)") || fail 78 "uid $(id -u) has no passwd entry: sshd cannot log in as it"
	LOGIN_USER=${entry%%:*}
	shell=${entry##*:}
	case ${shell##*/} in
	nologin | false) fail 78 "the login shell of $LOGIN_USER is $shell: sshd runs commands through it, give $LOGIN_USER a real shell" ;;
	esac
	command -v ssh-keygen >/dev/null || fail 78 "ssh-keygen is not installed (package openssh-client)"
}

# sftp_server: the sftp-server binary, if any, so that scp/sftp work inside the sandbox.
sftp_server() {
	local candidate
	for candidate in /usr/lib/openssh/sftp-server /usr/libexec/openssh/sftp-server /usr/libexec/sftp-server /usr/lib/ssh/sftp-server; do
		[[ -x $candidate ]] && { echo "$candidate"; return 0; }
	done
	return 0
}

# configure_boot_delay: LOCAL_BOOT_DELAY as BOOT_DELAY_MS, needed by create only.
configure_boot_delay() {
	local delay=${LOCAL_BOOT_DELAY:-0}
	[[ $delay =~ ^([0-9]{1,5})(\.([0-9]{1,3}))?$ ]] ||
		fail 78 "invalid LOCAL_BOOT_DELAY '$delay' (want seconds, e.g. 5 or 2.5)"
	local fraction=${BASH_REMATCH[3]}000
	BOOT_DELAY_MS=$((10#${BASH_REMATCH[1]} * 1000 + 10#${fraction:0:3}))
}
