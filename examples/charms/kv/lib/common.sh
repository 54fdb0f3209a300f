# common.sh: sourced by every hook of the kv charm, after `set -eu`.

# The unit's own directory is the charm directory's parent: the unit agent
# keeps it for the unit's life, while the charm directory is replaced when
# the charm is.
state=$(dirname "$LIFELINE_CHARM_DIR")/kv
server=$LIFELINE_CHARM_DIR/bin/kv-server
pidfile=$state/kv-server.pid
mkdir -p "$state"

. "$LIFELINE_CHARM_DIR/lib/daemon.sh"

# want_addr prints the address the server is to serve on: the unit's
# private address and the configured port.
want_addr() {
	_host=$(unit-get private-address)
	_port=$(config-get port)
	if [ -z "$_host" ] || [ -z "$_port" ]; then
		echo "no address: private-address \"$_host\", port \"$_port\"" >&2
		return 1
	fi
	echo "$_host:$_port"
}

# start_server runs the server on want_addr, restarting it if it runs on
# another address, and sets the unit's status.
start_server() {
	addr=$(want_addr)
	if daemon_pid "$pidfile" "$server" >/dev/null; then
		if [ "$(cat "$state/addr" 2>/dev/null || true)" = "$addr" ]; then
			status-set active "serving on $addr"
			return 0
		fi
		status-set maintenance "moving kv-server to $addr"
		daemon_stop "$pidfile" "$server"
	fi
	status-set maintenance "starting kv-server on $addr"
	echo "$addr" >"$state/addr"
	daemon_start "$pidfile" "$state/kv-server.log" "http://$addr/health" \
		"$server" -addr "$addr" -data "$state/data.json"
	status-set active "serving on $addr"
}

# publish gives the related units of relation $1 (the hook's relation when
# absent) this unit's host and port.
publish() {
	_host=$(unit-get private-address)
	_port=$(config-get port)
	relation-set -r "${1:-$LIFELINE_RELATION_ID}" "host=$_host" "port=$_port"
}
