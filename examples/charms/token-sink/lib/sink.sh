# shellcheck shell=bash
# Sourced by the hooks: what they share.

# set_status lists the tokens of the source units related (unit=token),
# and the source's leader as the source's application data names it.
set_status() {
    local rid unit app="" tokens="" leader=""
    for rid in $(relation-ids token); do
        for unit in $(relation-list -r "$rid"); do
            tokens="$tokens $unit=$(relation-get -r "$rid" token "$unit")"
            app=${unit%/*}
        done
        if [ -n "$app" ]; then
            leader=$(relation-get -r "$rid" --app leader "$app")
        fi
    done
    if [ -z "$tokens" ]; then
        status-set blocked "waiting for a token relation"
    else
        status-set active "tokens:$tokens; leader ${leader:-unknown}"
    fi
}
