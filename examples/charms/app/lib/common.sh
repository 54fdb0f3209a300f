# common.sh: sourced by every hook of the app charm, after `set -eu`.
#
# The machine agent runs app-server as the charm's daemon (metadata.yaml's
# host section): the hooks never start or stop it.

# The unit's own directory is the charm directory's parent: the unit agent
# keeps it for the unit's life, while the charm directory is replaced when
# the charm is.
unitdir=$(dirname "$LIFELINE_CHARM_DIR")
state=$unitdir/app
server=$LIFELINE_CHARM_DIR/bin/app-server
# kvfile holds the kv unit's "HOST:PORT"; app-server reads it on every
# request, so rewriting it is enough to point the server elsewhere.
kvfile=$state/kv-address
mkdir -p "$state"

# want_addr prints the address the server is to serve on: the unit's
# private address and the configured port, which it checks.
want_addr() {
	_host=$(unit-get private-address)
	_port=$(config-get port)
	check_port "$_port" || return 1
	if [ -z "$_host" ]; then
		echo "no private address" >&2
		return 1
	fi
	echo "$_host:$_port"
}

# check_port fails unless $1 is a TCP port, 1 to 65535.
check_port() {
	case $1 in
	'' | *[!0-9]*) ;;
	*) if [ "${#1}" -le 5 ] && [ "$1" -ge 1 ] && [ "$1" -le 65535 ]; then return 0; fi ;;
	esac
	echo "port \"$1\" is not a TCP port: want 1 to 65535" >&2
	return 1
}

# claim_port makes the configured port the unit's one opened port: its
# claim on the machine, which ctl status shows and the machine agent
# weighs against the other units' claims.
claim_port() {
	_port=$(config-get port)
	check_port "$_port" || return 1
	for _p in $(opened-ports); do
		[ "$_p" = "$_port/tcp" ] || close-port "$_p"
	done
	open-port "$_port/tcp"
}

# wait_serving waits (10 s at most) until the server answers on address
# $1; it fails with the end of the server's log when it does not.
wait_serving() {
	if "$server" probe -timeout 10s "http://$1/health" 2>/dev/null; then
		return 0
	fi
	echo "app-server does not answer on $1; the end of $unitdir/daemons/app-server.log:" >&2
	tail -n 10 "$unitdir/daemons/app-server.log" >&2 2>/dev/null || true
	return 1
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
# empty, and sets the unit's status.
use_kv() {
	if [ -n "$1" ]; then
		echo "$1" >"$kvfile.new"
		mv -f "$kvfile.new" "$kvfile"
	else
		rm -f "$kvfile"
	fi
	set_status
}
