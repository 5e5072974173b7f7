# shellcheck shell=bash
# Sourced by ../provisioner: the verb destroy, and the sweep of what cut-short calls left.

# destroy_machine ID DIR: end every process of the machine, then remove its directory.
destroy_machine() {
	local id=$1 dir=$2
	[[ -d $dir ]] || return 0
	: >"$dir/destroying" 2>/dev/null || true # status and list now say "stopping"
	kill_machine "$id" "$dir" || return 1
	# Big trees (a job's build directory) go outside the lock; the rest under it, so that key
	# lookups and port choices never read a half-removed machine.
	local entry
	for entry in "$dir"/* "$dir"/.[!.]*; do
		case ${entry##*/} in machine.json | destroying) ;; *) remove_tree "$entry" || return 1 ;; esac
	done
	# One rename under the lock makes the machine gone at once, as a cloud's delete is: a
	# destroy cut short by its timeout after it (the autoscaler kills slow calls) leaves only a
	# hidden directory with no process, which the next destroy sweeps, never a half-removed
	# machine that list no longer shows but that still holds its directory.
	local trash=$ROOT/.gone-$id-$$
	lock_root
	mv -- "$dir" "$trash" || { unlock_root; return 1; }
	unlock_root
	remove_tree "$trash" || return 1
}

# sweep_gone: removes what creates and destroys cut short left behind: a `.partial-ID-PID` or
# `.gone-ID-PID` directory whose call (PID) is no longer running.
sweep_gone() {
	local old
	for old in "$ROOT"/.partial-* "$ROOT"/.gone-*; do
		[[ -e $old ]] || continue
		kill -0 "${old##*-}" 2>/dev/null && continue
		remove_tree "$old" 2>/dev/null || true
	done
}

cmd_destroy() {
	local id=$1
	sweep_gone
	if valid_id "$id" && [[ -d $ROOT/$id ]]; then
		log "destroying machine $id"
		destroy_machine "$id" "$ROOT/$id" || fail 1 "machine $id could not be destroyed completely; will retry"
		log "machine $id is gone"
	fi
	respond_gone "$id"
}
