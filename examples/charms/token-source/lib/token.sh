# shellcheck shell=bash
# Sourced by the hooks: what they share.

# publish_token offers the token to every sink on relation $1 (the hook's
# own relation when none is given), and the leader names itself in the
# relation's application data.
publish_token() {
    local rid=${1:-$JUJU_RELATION_ID}
    relation-set -r "$rid" token="$(config-get token)" unit="$JUJU_UNIT_NAME"
    if [ "$(is-leader)" == "True" ]; then
        relation-set -r "$rid" --app leader="$JUJU_UNIT_NAME"
    fi
}

# set_status says whether this unit leads (or whom it follows, from the
# leader settings) and which sinks acknowledged the token.
set_status() {
    local role acks="" rid unit ack
    if [ "$(is-leader)" == "True" ]; then
        role="leader"
    else
        role="follower of $(leader-get leader)"
    fi
    for rid in $(relation-ids token); do
        for unit in $(relation-list -r "$rid"); do
            ack=$(relation-get -r "$rid" ack "$unit")
            if [ -n "$ack" ]; then
                acks="$acks, $unit acked $ack"
            fi
        done
    done
    status-set active "$role$acks"
}
