# common.sh: sourced by every hook and action of the kv charm, after
# `set -eu`.
#
# The machine agent runs kv-server as the charm's daemon (metadata.yaml's
# host section) and writes kv/addr: the hooks never start or stop it.

# The unit's own directory is the charm directory's parent: the unit agent
# keeps it for the unit's life, while the charm directory is replaced when
# the charm is.
unitdir=$(dirname "$LIFELINE_CHARM_DIR")
state=$unitdir/kv
server=$LIFELINE_CHARM_DIR/bin/kv-server
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
	echo "kv-server does not answer on $1; the end of $unitdir/daemons/kv-server.log:" >&2
	tail -n 10 "$unitdir/daemons/kv-server.log" >&2 2>/dev/null || true
	return 1
}

# publish gives the related units of relation $1 (the hook's relation when
# absent) this unit's host and port.
publish() {
	_host=$(unit-get private-address)
	_port=$(config-get port)
	relation-set -r "${1:-$LIFELINE_RELATION_ID}" "host=$_host" "port=$_port"
}
