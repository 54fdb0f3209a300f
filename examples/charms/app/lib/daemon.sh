# daemon.sh: run a server in the background from a hook, tracked by a pid
# file. Sourced by hooks that have `set -eu`; the same file is in the kv and
# app charms. Variables starting with "_d_" are its own.
#
#   daemon_pid PIDFILE PROGRAM
#       prints the pid of PROGRAM running from PIDFILE, or fails
#   daemon_start PIDFILE LOGFILE URL PROGRAM [ARG...]
#       starts PROGRAM ARG... unless it is running, and waits (at most about
#       10 s) until URL answers, through PROGRAM's "probe" subcommand
#   daemon_stop PIDFILE PROGRAM
#       stops it: SIGTERM, then SIGKILL after 10 s; fine if it is not running

daemon_pid() {
	[ -f "$1" ] || return 1
	_d_pid=$(cat "$1")
	case $_d_pid in '' | *[!0-9]*) return 1 ;; esac
	kill -0 "$_d_pid" 2>/dev/null || return 1
	# Where /proc tells, not another program that reused the pid, nor a
	# zombie (whose command line is empty).
	if [ -r "/proc/$_d_pid/cmdline" ]; then
		case $(tr '\0' ' ' <"/proc/$_d_pid/cmdline" 2>/dev/null) in
		*"${2##*/}"*) ;;
		*) return 1 ;;
		esac
	fi
	echo "$_d_pid"
}

daemon_start() {
	_d_pidfile=$1 _d_log=$2 _d_url=$3
	shift 3
	if daemon_pid "$_d_pidfile" "$1" >/dev/null; then
		return 0
	fi
	# Every stream of the server goes to or from a file, so that it holds
	# none of the hook's pipes and the hook ends when its script does; nohup
	# keeps a hangup from ending it.
	echo "$(date -u +%Y-%m-%dT%H:%M:%SZ) starting: $*" >>"$_d_log"
	nohup "$@" </dev/null >>"$_d_log" 2>&1 &
	echo "$!" >"$_d_pidfile"
	_d_try=0
	while :; do
		if "$1" probe -timeout 1s "$_d_url" 2>/dev/null; then
			# Answered: by this server, unless it has died since (another
			# process may hold the port).
			daemon_pid "$_d_pidfile" "$1" >/dev/null && return 0
		fi
		_d_try=$((_d_try + 1))
		if ! daemon_pid "$_d_pidfile" "$1" >/dev/null || [ "$_d_try" -ge 10 ]; then
			echo "${1##*/} did not start serving $_d_url; the end of $_d_log:" >&2
			tail -n 10 "$_d_log" >&2 || true
			daemon_stop "$_d_pidfile" "$1"
			return 1
		fi
	done
}

daemon_stop() {
	if _d_victim=$(daemon_pid "$1" "$2"); then
		kill -TERM "$_d_victim" 2>/dev/null || true
		_d_try=0
		while daemon_pid "$1" "$2" >/dev/null; do
			_d_try=$((_d_try + 1))
			case $_d_try in
			100) kill -KILL "$_d_victim" 2>/dev/null || true ;; # after 10 s
			150)
				echo "${2##*/} (pid $_d_victim) does not stop" >&2
				return 1
				;;
			esac
			sleep 0.1
		done
	fi
	rm -f "$1"
}
