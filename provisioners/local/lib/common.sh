# shellcheck shell=bash
# Sourced by ../provisioner: settings every part reads, logging, error responses, the request
# and the responses several verbs share.

readonly NAME=local VERSION=1.0.0
readonly MARKER=AUTOSCALER_LOCAL_MACHINE
readonly READY_WAIT_TENTHS=50 # sshd must answer within 5 s of starting
readonly TERM_GRACE_TENTHS=20 # processes get 2 s after SIGTERM before SIGKILL
readonly KILL_WAIT_TENTHS=30  # and 3 s more to disappear after SIGKILL
readonly BIND_ATTEMPTS=10     # ports tried when another program grabs ours first
declare -A FAILED_PORTS=()    # ports this call could not bind, so not to be picked again

log() { printf 'local: %s\n' "$*" >&2; }

# fail CODE MESSAGE: answer an error response on stdout and exit with CODE.
# 75 = retry later, 78 = permanent (api-spec/provisioner.md, "Exit codes").
fail() {
	local code=$1
	shift
	log "error: $*"
	if [[ $code == 75 ]]; then
		jq -cn --arg e "$*" '{error: $e, retry_after: 5}'
	else
		jq -cn --arg e "$*" '{error: $e}'
	fi
	exit "$code"
}

# --- request ---------------------------------------------------------------------------------

# read_request: the whole of stdin must be exactly one JSON object.
read_request() {
	REQUEST=$(cat)
	jq -se 'length == 1 and (.[0] | type) == "object"' <<<"$REQUEST" >/dev/null 2>&1 ||
		fail 78 "the request on stdin is not one JSON object"
	local protocol
	protocol=$(jq -c '.protocol // 1' <<<"$REQUEST")
	[[ $protocol == 1 ]] || fail 78 "unsupported protocol $protocol (this provisioner speaks 1)"
}

# req FILTER: evaluate a jq filter on the request.
req() { jq -c "$1" <<<"$REQUEST"; }

# --- helpers ---------------------------------------------------------------------------------

# now_ms: the time in milliseconds since the epoch.
now_ms() {
	if [[ -n ${EPOCHREALTIME:-} ]]; then
		local t=${EPOCHREALTIME/[.,]/}
		echo $((10#$t / 1000))
	else
		date +%s%3N
	fi
}

respond_gone() { jq -cn --arg id "$1" '{id: $id, state: "gone"}'; }

respond_state() { jq -cn --arg id "$1" --arg state "$2" '{id: $id, state: $state}'; }
