#!/bin/sh
# softroce.rust-async (issue 32): the Rust API's async examples on SoftRoCE,
# inside the VM: async_server on rxe1 and async_client on rxe0 as two
# processes (10 connections, REQ/REP/RTU and DREQ/DREP private data checked
# on each), then async_pair, both sides in one process and thread.
# Exit 77 without rxe0/rxe1 or the examples (make softroce builds them:
# cargo build --release --features tokio --examples).
#
#   rust_async_softroce.sh EXAMPLES_DIR LOGDIR
set -u
bin=$1 dir=$2/rust-async
for d in rxe0 rxe1; do
    [ -e /sys/class/infiniband/$d ] || { echo "SKIP: no $d"; exit 77; }
done
for e in async_server async_client async_pair; do
    [ -x "$bin/$e" ] || { echo "SKIP: no $bin/$e"; exit 77; }
done
rm -rf "$dir" && mkdir -p "$dir" && cd "$dir" || exit 1
timeout 120 "$bin/async_server" -d rxe1 -n 10 >server.out 2>&1 &
server=$!
i=0
until grep -q "listening on" server.out; do
    i=$((i + 1))
    [ $i -gt 300 ] && { echo "async_server did not start"; cat server.out; kill $server; exit 1; }
    sleep 0.1
done
# rxe1's IPv4-mapped GID (RoCE v2 on veth1, 10.77.0.2), as the server lists it.
gid=$(sed -n 's/.*GID index [0-9]*: \(::ffff:[0-9.]*\)$/\1/p' server.out | head -n 1)
[ -n "$gid" ] || { echo "no IPv4 GID for rxe1"; cat server.out; kill $server; exit 1; }
timeout 120 "$bin/async_client" -d rxe0 -g "$gid" -n 10 >client.out 2>&1
crc=$?
wait $server
src=$?
timeout 120 "$bin/async_pair" -d rxe0 -D rxe1 -n 10 >pair.out 2>&1
prc=$?
for f in server client pair; do echo "--- $f"; cat $f.out; done
[ $src = 0 ] && [ $crc = 0 ] && [ $prc = 0 ] &&
    grep -q 'every private data as sent: OK' client.out && grep -q 'every private data as sent: OK' pair.out
