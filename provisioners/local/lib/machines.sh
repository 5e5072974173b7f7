# shellcheck shell=bash
# Sourced by ../provisioner: locks, machine ids, a machine's state, and port choices.

# --- locks -----------------------------------------------------------------------------------

# lock_root / unlock_root: exclusive lock on <root>/.lock, for key lookups, port choices and
# removing machine directories, so concurrent calls never pick the same port or duplicate a key.
lock_root() {
	exec {ROOT_FD}>>"$ROOT/.lock"
	flock -w 60 "$ROOT_FD" || fail 75 "timed out waiting for $ROOT/.lock"
}
unlock_root() {
	exec {ROOT_FD}>&-
	ROOT_FD=
}

# lock_creating DIR: hold DIR/create.lock until this process exits; status and list report the
# machine as "creating" meanwhile. Fails if another process holds it.
lock_creating() {
	exec {CREATE_FD}>>"$1/create.lock"
	flock -w 2 "$CREATE_FD"
}

# --- machines --------------------------------------------------------------------------------

valid_id() { [[ $1 =~ ^[A-Za-z0-9][A-Za-z0-9._-]{0,254}$ ]]; }

new_id() { printf 'local-%s\n' "$(od -An -N6 -tx1 /dev/urandom | tr -d ' \n')"; }

# find_by_key KEY: id of the machine created with this idempotency key (not one being destroyed).
find_by_key() {
	local f id
	# A file may vanish while jq reads the set (a destroy outside the lock); ignore that.
	for id in $(jq -r --arg k "$1" 'select(.key == $k) | .id' "$ROOT"/*/machine.json 2>/dev/null || true); do
		[[ -e $ROOT/$id/destroying ]] || { echo "$id"; return 0; }
	done
}

# sshd_pid DIR: pid of DIR's listening sshd, if it is alive. The pid file alone could name a
# recycled pid, so the command line must also name this sandbox's sshd_config.
sshd_pid() {
	local dir=$1 pid cmdline
	read -r pid 2>/dev/null <"$dir/sshd.pid" || return 1
	[[ $pid =~ ^[0-9]+$ ]] || return 1
	cmdline=$(tr '\0' ' ' 2>/dev/null </proc/"$pid"/cmdline) || return 1
	[[ $cmdline == *"$dir/ssh/sshd_config"* ]] || return 1
	echo "$pid"
}

# is_creating DIR: a create call holds DIR/create.lock.
is_creating() { is_held "$1/create.lock"; }

# is_held LOCKFILE: another call holds this lock file.
is_held() { [[ -e $1 ]] && ! flock -n "$1" true; }

# is_starting DIR: a start call is bringing sshd back, or its boot delay has not passed.
is_starting() { [[ -e $1/starting ]] && { is_held "$1/start.lock" || still_booting "$1"; }; }

# state_of DIR: the machine's state per api-spec/provisioner.md, "Machines, labels and states".
state_of() {
	local dir=$1
	if [[ ! -e $dir/machine.json ]]; then
		echo gone
	elif [[ -e $dir/destroying || -e $dir/stopping ]]; then
		echo stopping
	elif is_starting "$dir"; then
		echo starting
	elif [[ -e $dir/stopped ]]; then
		echo stopped
	elif is_creating "$dir" || still_booting "$dir"; then
		echo creating
	elif sshd_pid "$dir" >/dev/null; then
		echo running
	else
		echo failed
	fi
}

# still_booting DIR: the machine's injected boot delay (ready_at in machine.json) has not passed.
# Read without jq: list asks this of every machine.
still_booting() {
	local meta
	meta=$(cat 2>/dev/null <"$1/machine.json") || return 1
	[[ $meta =~ \"ready_at\":\ *([0-9]+) ]] || return 1
	((BASH_REMATCH[1] > $(now_ms)))
}

# used_ports: ports reserved by sandboxes, plus every TCP port bound on this host right now.
used_ports() {
	jq -r '.port // empty' "$ROOT"/*/machine.json 2>/dev/null || true
	local table line port
	for table in /proc/net/tcp /proc/net/tcp6; do
		[[ -r $table ]] || continue
		while read -r _ line _; do
			port=${line##*:}
			[[ $port =~ ^[0-9A-F]{4}$ ]] && echo $((16#$port))
		done <"$table"
	done
}

# pick_port: a free port of the range, starting at a random one. Call with the root lock held.
pick_port() {
	local -A used=()
	local p size start i
	for p in $(used_ports) "${!FAILED_PORTS[@]}"; do used[$p]=1; done
	size=$((PORT_HIGH - PORT_LOW + 1))
	start=$(((RANDOM * 32768 + RANDOM) % size))
	for ((i = 0; i < size; i++)); do
		p=$((PORT_LOW + (start + i) % size))
		[[ -z ${used[$p]:-} ]] && { echo "$p"; return 0; }
	done
	return 1
}

# set_port DIR PORT: record the machine's port in machine.json (atomically: readers never see
# half a file).
set_port() {
	jq --argjson p "$2" '.port = $p' "$1/machine.json" >"$1/machine.json.tmp"
	mv -f "$1/machine.json.tmp" "$1/machine.json"
}
