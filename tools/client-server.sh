#!/usr/bin/env bash
# client-server.sh IBCM_CMTIME [CONNECTIONS [extra client options...]]
#
# ibcm-cmtime in its two-process mode on real devices: a server on
# $IBCM_DEV_B (default rxe1), a client on $IBCM_DEV_A (default rxe0) that
# connects to the server's GID (the IPv4-mapped one if the port has one, as
# rdma_cm would use on RoCE; else GID index 0). Prints the client's table
# (or JSON with --json), then the server's summary; exits non-zero if either
# side failed, 77 if the devices do not exist. IBCM_CLIENT_WRAP, if set, is
# put before the client's command line (e.g. /usr/bin/time -o FILE).
set -uo pipefail
. "$(dirname "$0")/common.sh"
TOOL=${1:?usage: client-server.sh IBCM_CMTIME [CONNECTIONS [client options]]}
N=${2:-100}
shift $(($# >= 2 ? 2 : 1))
A=${IBCM_DEV_A:-rxe0} B=${IBCM_DEV_B:-rxe1}
for d in "$A" "$B"; do
  [ -e "/sys/class/infiniband/$d" ] || { echo "client-server: no device $d: skipped"; exit 77; }
done
LOG=$(mktemp /tmp/ibcm-server.XXXXXX)
trap 'rm -f "$LOG"' EXIT
json=
for a in "$@"; do [ "$a" = --json ] && json=--json; done
"$TOOL" --server -D "$B" $json > "$LOG.out" 2> "$LOG" &
server=$!
wait_for_listening "$LOG" $server
if ! grep -q 'server: listening' "$LOG"; then
  echo "client-server: the server did not start:" >&2; cat "$LOG" >&2
  kill $server 2>/dev/null; wait $server; exit 1
fi
gid=$(sed -n 's/.*GID index [0-9]*: \(::ffff:.*\)$/\1/p' "$LOG" | head -1)
[ -n "$gid" ] || gid=$(sed -n 's/.*GID index 0: \(.*\)$/\1/p' "$LOG" | head -1)
# IBCM_CLIENT_WRAP: a command prefix for the client alone (e.g. /usr/bin/time).
${IBCM_CLIENT_WRAP:-} "$TOOL" --client "$gid" -d "$A" -c "$N" "$@"
crc=$?
# The client's farewell stops the server; a lost farewell must not hang us.
for _ in $(seq 1 300); do kill -0 $server 2>/dev/null || break; sleep 0.1; done
kill -0 $server 2>/dev/null && kill -TERM $server
wait $server
src=$?
cat "$LOG" >&2
cat "$LOG.out"
rm -f "$LOG.out"
echo "client-server: client rc=$crc, server rc=$src (client $A -> server $B at $gid)" >&2
[ $crc = 0 ] && [ $src = 0 ]
