# shellcheck shell=bash
# Sourced by ../provisioner: the verbs info and create, and a new machine's user-data.

# --- verbs -----------------------------------------------------------------------------------

cmd_info() {
	jq -cn --arg name "$NAME" --arg version "$VERSION" \
		'{protocol: 1, name: $name, version: $version,
		  capabilities: {batch_create: false, max_batch: 1, host_key: true, machine_user_data: true,
		                 stop_start: true}}'
}

cmd_create() {
	# Validate the whole request before touching anything: a bad one fails the same way again.
	req '.machines | type == "array" and length >= 1' | grep -qx true || fail 78 "machines must be a non-empty array"
	[[ $(req '.machines | length') == 1 ]] || fail 78 "batch_create is not supported: send one machine per create"
	local key labels pubkey
	key=$(jq -r '.machines[0].key | strings' <<<"$REQUEST")
	[[ -n $key && ${#key} -le 128 ]] || fail 78 "machines[0].key must be a string of 1 to 128 characters"
	labels=$(req '.machines[0].labels // {}')
	jq -e 'type == "object" and all(.[]; type == "string")' <<<"$labels" >/dev/null ||
		fail 78 "machines[0].labels must be an object of strings"
	pubkey=$(jq -r '.ssh_public_key | strings' <<<"$REQUEST")
	local key_pattern='^(ssh-ed25519|ssh-rsa|ecdsa-sha2-nistp(256|384|521)) [A-Za-z0-9+/=]+( .*)?$'
	[[ $pubkey != *$'\n'* && $pubkey =~ $key_pattern ]] ||
		fail 78 "ssh_public_key must be one OpenSSH public key line"
	[[ $(req '.user_data') == null ]] || log "the pool's user_data is ignored by local sandboxes"
	local user_data_type
	user_data_type=$(jq -r '.machines[0].user_data | type' <<<"$REQUEST")
	[[ $user_data_type == null || $user_data_type == string ]] || fail 78 "machines[0].user_data must be a string"

	configure_ports
	configure_boot_delay
	# The root goes into sshd_config, where whitespace and quotes split arguments and % starts a
	# token (AuthorizedKeysFile), and into ForceCommand, which a shell parses.
	[[ ! $ROOT =~ [[:space:][:cntrl:]\"\'\\%#\$\`] ]] ||
		fail 78 "the sandbox root '$ROOT' holds characters sshd_config cannot take (whitespace, quotes, \\, %, #, \$ or \`); set LOCAL_ROOT"
	find_sshd
	check_login_user
	mkdir -p "$ROOT" || fail 78 "cannot create $ROOT"

	local id dir state
	lock_root
	id=$(find_by_key "$key")
	if [[ -n $id ]]; then
		dir=$ROOT/$id
		state=$(state_of "$dir")
		log "machine $id already has key $key ($state)"
		if [[ $state == running || $state == creating ]]; then
			unlock_root
			respond_created "$key" "$id" "$state"
			return 0
		fi
		# A create that was killed half-way, an sshd that died, or a machine stopped since: finish
		# making it (running, as a create asks).
		lock_creating "$dir" || { unlock_root; respond_created "$key" "$id" creating; return 0; }
		rm -f "$dir/stopped" "$dir/starting"
	else
		id=$(new_id)
		dir=$ROOT/$id
		# Made aside and renamed into place whole: a create cut short by its timeout (the
		# autoscaler kills slow calls) leaves a hidden directory that the next destroy sweeps,
		# never a machine directory without its machine.json, which list could not show.
		local staging=$ROOT/.partial-$id-$$
		mkdir "$staging" || fail 1 "cannot create $staging"
		lock_creating "$staging" || fail 1 "cannot lock $staging/create.lock"
		local port
		if ! port=$(pick_port); then
			remove_tree "$staging"
			fail 75 "no free port in $PORT_LOW-$PORT_HIGH"
		fi
		jq -n --arg id "$id" --arg key "$key" --arg pool "$POOL" --argjson labels "$labels" \
			--argjson port "$port" --arg user "$LOGIN_USER" --arg created "$(date -u +%Y-%m-%dT%H:%M:%SZ)" \
			--argjson ready_at $(($(now_ms) + BOOT_DELAY_MS)) \
			'{id: $id, key: $key, pool: $pool, labels: $labels, port: $port, user: $user, created: $created,
			  ready_at: $ready_at}' \
			>"$staging/machine.json"
		# The create lock moves with the directory (it is held on the file, not its path).
		mv -- "$staging" "$dir" || { remove_tree "$staging"; fail 1 "cannot create $dir"; }
		log "creating machine $id for key $key on port $port"
	fi
	unlock_root

	if ! boot "$dir" "$id" "$pubkey"; then
		log "machine $id failed to start, removing it"
		destroy_machine "$id" "$dir" || true
		fail "$BOOT_CODE" "$BOOT_ERROR"
	fi
	if [[ $user_data_type == string ]]; then
		jq -r '.machines[0].user_data' <<<"$REQUEST" >"$dir/user-data"
		run_user_data "$dir" "$id"
	fi
	if still_booting "$dir"; then
		log "machine $id is booting (LOCAL_BOOT_DELAY)"
		respond_created "$key" "$id" creating
		return 0
	fi
	log "machine $id is running"
	respond_created "$key" "$id" running
}

# run_user_data DIR ID: the machine's own user-data is its boot script, run once (like
# cloud-init's scripts-user) in the background, as a process of the machine: with the sandbox's
# HOME and TMPDIR and the marker, so that destroy ends it and whatever it starts.
run_user_data() {
	local dir=$1 id=$2
	[[ -e $dir/user-data.started ]] && return 0
	: >"$dir/user-data.started"
	chmod 0700 "$dir/user-data"
	(
		# Lock descriptors must not outlive this call inside the machine's processes.
		[[ -n ${ROOT_FD:-} ]] && exec {ROOT_FD}>&-
		[[ -n ${CREATE_FD:-} ]] && exec {CREATE_FD}>&-
		cd "$dir/home" || exit 1
		export HOME="$dir/home" TMPDIR="$dir/tmp" "$MARKER=$id"
		exec setsid "$dir/user-data"
	) </dev/null >>"$dir/user-data.log" 2>&1 &
	log "machine $id runs its user-data (log: $dir/user-data.log)"
}

respond_created() {
	jq -cn --arg key "$1" --arg id "$2" --arg state "$3" '{machines: [{key: $key, id: $id, state: $state}]}'
}
