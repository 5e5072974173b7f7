# shellcheck shell=bash
# Sourced by ../provisioner: the verbs that only look, list and status.

cmd_list() {
	local want f dir meta
	want=$(req '.labels // {}')
	jq -e 'type == "object"' <<<"$want" >/dev/null || fail 78 "labels must be an object"
	for f in "$ROOT"/*/machine.json; do
		meta=$(cat 2>/dev/null <"$f") || continue # destroyed meanwhile
		dir=${f%/machine.json}
		jq -c --argjson want "$want" --arg state "$(state_of "$dir")" \
			'select(.labels as $have | $want | to_entries | all($have[.key] == .value))
			 | {id, state: $state, labels}' <<<"$meta" 2>/dev/null || true
	done | jq -cs '{machines: map(select(.state != "gone"))}'
}

cmd_status() {
	local id=$1 dir state meta pid host_key
	if ! valid_id "$id" || [[ ! -e $ROOT/$id/machine.json ]]; then
		respond_gone "$id"
		return 0
	fi
	dir=$ROOT/$id
	state=$(state_of "$dir")
	meta=$(cat 2>/dev/null <"$dir/machine.json") || { respond_gone "$id"; return 0; }
	case $state in
	running)
		host_key=$(cut -d' ' -f1,2 2>/dev/null <"$dir/ssh/ssh_host_ed25519_key.pub") || host_key=
		jq -c --arg host_key "$host_key" \
			'{id, state: "running", address: "127.0.0.1", port, user, host_key: $host_key, labels}
			 | if $host_key == "" then del(.host_key) else . end' <<<"$meta"
		;;
	failed)
		jq -c --arg msg "sshd of this sandbox is not running (see $dir/sshd.log)" \
			'{id, state: "failed", labels, message: $msg}' <<<"$meta"
		;;
	*)
		jq -c --arg state "$state" '{id, state: $state, labels}' <<<"$meta"
		;;
	esac
}
