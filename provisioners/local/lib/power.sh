# shellcheck shell=bash
# Sourced by ../provisioner: the verbs stop and start (capability stop_start).

# refuse_power VERB ID STATE: a machine in STATE cannot take VERB; one on its way somewhere
# (creating, being destroyed) may take it later (75), a failed one never (78).
refuse_power() {
	local verb=$1 id=$2 state=$3
	case $state in
	failed) fail 78 "machine $id has failed (its sshd is not running): destroy it, it cannot $verb" ;;
	*) fail 75 "machine $id is $state; $verb it once that is over" ;;
	esac
}

# cmd_stop ID: end every process of the machine, sshd included, and keep its directory: its
# disk, host key, authorized key and labels stay for a later start.
cmd_stop() {
	local id=$1 dir state
	if ! valid_id "$id" || [[ ! -e $ROOT/$id/machine.json ]]; then
		respond_gone "$id"
		return 0
	fi
	dir=$ROOT/$id
	state=$(state_of "$dir")
	case $state in
	stopped) respond_state "$id" stopped && return 0 ;;
	running | starting) ;;
	# A stop cut short (by its timeout) left its marker: finish it. Not so a destroy.
	stopping) [[ ! -e $dir/destroying ]] || refuse_power stop "$id" "$state" ;;
	*) refuse_power stop "$id" "$state" ;;
	esac
	log "stopping machine $id"
	: >"$dir/stopping"
	kill_machine "$id" "$dir" || fail 1 "machine $id could not be stopped completely; will retry"
	: >"$dir/stopped"
	rm -f "$dir/starting" "$dir/stopping"
	log "machine $id is stopped"
	respond_state "$id" stopped
}

# cmd_start ID: start the machine's sshd again, on its old port if that is free, else on a new
# one (status gives it). Its user-data is not run again: cloud-init runs it once per instance,
# so what it started (a sidecar) must be started again by whoever started it first.
cmd_start() {
	local id=$1 dir state
	if ! valid_id "$id" || [[ ! -e $ROOT/$id/machine.json ]]; then
		respond_gone "$id"
		return 0
	fi
	dir=$ROOT/$id
	state=$(state_of "$dir")
	case $state in
	running | starting) respond_state "$id" "$state" && return 0 ;;
	stopped) ;;
	*) refuse_power start "$id" "$state" ;;
	esac
	configure_ports
	configure_boot_delay
	find_sshd
	check_login_user
	exec {START_FD}>>"$dir/start.lock"
	flock -w 2 "$START_FD" || fail 75 "another call is starting machine $id"
	log "starting machine $id"
	: >"$dir/starting"
	# An sshd left by a start that was killed after launching it is this machine's: keep it.
	if ! sshd_pid "$dir" >/dev/null && ! listen "$dir"; then
		kill_machine "$id" "$dir" || true
		rm -f "$dir/starting"
		fail "$BOOT_CODE" "machine $id did not start: $BOOT_ERROR"
	fi
	jq --argjson t $(($(now_ms) + BOOT_DELAY_MS)) '.ready_at = $t' "$dir/machine.json" >"$dir/machine.json.tmp"
	mv -f "$dir/machine.json.tmp" "$dir/machine.json"
	rm -f "$dir/stopped"
	if still_booting "$dir"; then
		log "machine $id is starting (LOCAL_BOOT_DELAY)"
		respond_state "$id" starting
		return 0
	fi
	log "machine $id is running on port $(jq -r .port "$dir/machine.json")"
	respond_state "$id" running
}
