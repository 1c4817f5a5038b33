#!/bin/sh
# softroce.rust-rc-pingpong (issue 32): two real RC QPs on rxe0 and rxe1,
# created with the sideway verbs crate, connected by the Rust API (REQ, REP,
# RTU; each QP moved to INIT, RTR and RTS by QpAttributes::apply_to), then
# 10 sends of 4 KiB from A to B and one back, every completion and every
# byte checked, and DREQ/DREP with private data (examples/rc_pingpong.rs).
# Exit 77 without rxe0/rxe1 or the example (make softroce builds it:
# cargo build --release --features tokio,sideway --examples).
#
#   rust_rc_pingpong_softroce.sh EXAMPLES_DIR LOGDIR
set -u
bin=$1/rc_pingpong dir=$2/rust-rc-pingpong
for d in rxe0 rxe1; do
    [ -e /sys/class/infiniband/$d ] || { echo "SKIP: no $d"; exit 77; }
done
[ -x "$bin" ] || { echo "SKIP: no $bin"; exit 77; }
rm -rf "$dir" && mkdir -p "$dir" && cd "$dir" || exit 1
timeout 120 "$bin" -d rxe0 -D rxe1 -n 10 -s 4096 >out 2>&1
rc=$?
cat out
[ $rc = 0 ] && grep -q 'every byte, completion and private data as sent: OK$' out
