# common.sh: sourced by every hook of the app charm, after `set -eu`.

# The unit's own directory is the charm directory's parent: the unit agent
# keeps it for the unit's life, while the charm directory is replaced when
# the charm is.
state=$(dirname "$LIFELINE_CHARM_DIR")/app
server=$LIFELINE_CHARM_DIR/bin/app-server
pidfile=$state/app-server.pid
# kvfile holds the kv unit's "HOST:PORT"; app-server reads it on every
# request, so rewriting it is enough to point the server elsewhere.
kvfile=$state/kv-address
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

# set_status says whether the unit has a kv unit to keep its counter in.
set_status() {
	if [ -s "$kvfile" ]; then
		_kv=$(cat "$kvfile")
		status-set active "counter in kv at $_kv"
	else
		status-set blocked "waiting for a kv relation"
	fi
}

# start_server runs the server on want_addr, restarting it if it runs on
# another address, and sets the unit's status.
start_server() {
	addr=$(want_addr)
	if daemon_pid "$pidfile" "$server" >/dev/null; then
		if [ "$(cat "$state/addr" 2>/dev/null || true)" = "$addr" ]; then
			set_status
			return 0
		fi
		status-set maintenance "moving app-server to $addr"
		daemon_stop "$pidfile" "$server"
	fi
	status-set maintenance "starting app-server on $addr"
	echo "$addr" >"$state/addr"
	daemon_start "$pidfile" "$state/app-server.log" "http://$addr/health" \
		"$server" -addr "$addr" -unit "$LIFELINE_UNIT_NAME" -kv-file "$kvfile"
	set_status
}

# find_kv prints the "HOST:PORT" of the kv unit to use: the first, by
# relation id then unit, that has published both. It skips relation $1
# (being broken) and unit $2 (departing), and prints nothing if none has.
find_kv() {
	_rids=$(relation-ids db)
	for _rid in $_rids; do
		[ "$_rid" != "${1:-}" ] || continue
		_units=$(relation-list -r "$_rid")
		for _unit in $_units; do
			[ "$_unit" != "${2:-}" ] || continue
			_host=$(relation-get -r "$_rid" host "$_unit")
			_port=$(relation-get -r "$_rid" port "$_unit")
			if [ -n "$_host" ] && [ -n "$_port" ]; then
				echo "$_host:$_port"
				return 0
			fi
		done
	done
	return 0
}

# use_kv points the server at kv "HOST:PORT" $1, or at none when $1 is
# empty, and sets the unit's status. The server is (re)started if the unit
# is started and it is not running.
use_kv() {
	if [ -n "$1" ]; then
		echo "$1" >"$kvfile.new"
		mv -f "$kvfile.new" "$kvfile"
	else
		rm -f "$kvfile"
	fi
	if [ -f "$state/started" ]; then
		start_server
	else
		set_status
	fi
}
