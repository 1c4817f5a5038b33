#!/usr/bin/env bash
# The Rust API against the C ABI on the same engine (issue 32): ibcm-cmtime
# (tools/ibcm-cmtime.c, through libib_cm.so) and examples/cmtime.rs through
# ib_cm::handler (--api handler: handlers on the worker, as the C tool's)
# and through ib_cm::aio (--api async: tokio tasks), alternating in one run,
# on the in-process fabric (loop0 → loop1). Prints each round's totals, then
# per phase the medians, their ranges and the ratios Rust / C of the
# medians, as a Markdown table (the issue's target: at most 1.05 in connect
# and disconnect; create and destroy are shown too).
#
#   scripts/perf/rust-vs-c-cmtime.sh [ROUNDS [CONNECTIONS]]   (default 5, 10000)
#
# Builds what it runs: the staged library and ibcm-cmtime as `make run` does,
# and the example in release mode (both with fat LTO: a few minutes cold).
set -euo pipefail
cd "$(dirname "$0")/../.."
ROUNDS=${1:-5}
CONNS=${2:-10000}
BUILD=${BUILD:-$PWD/build}
STAGE=$BUILD/stage

echo "building (log: $BUILD/rust-vs-c-build.log)" >&2
mkdir -p "$BUILD"
{
	make --no-print-directory -s stage BUILD="$BUILD"
	${CC:-cc} -std=c11 -O2 -Wall -Wextra -Werror -I"$STAGE/include" tools/ibcm-cmtime.c \
		-L"$STAGE/lib" -lib_cm -pthread -o "$BUILD/ibcm-cmtime"
	cargo build --locked --release --features tokio --example cmtime
} >"$BUILD/rust-vs-c-build.log" 2>&1 || { cat "$BUILD/rust-vs-c-build.log"; exit 1; }

C_TOOL=("$BUILD/ibcm-cmtime" -c "$CONNS")
RUST_TOOL=(target/release/examples/cmtime -c "$CONNS")
# The order within a round rotates, so that none always runs first.
run_c() { LD_LIBRARY_PATH="$STAGE/lib" "${C_TOOL[@]}" 2>/dev/null | totals; }
run_handler() { "${RUST_TOOL[@]}" --api handler 2>/dev/null | totals; }
run_async() { "${RUST_TOOL[@]}" --api async 2>/dev/null | totals; }

# "create connect disconnect destroy" total(ms) of one run's table.
totals() {
	awk '$1 == "create" { k = $3 } $1 == "connect" { c = $2 } $1 == "disconnect" { d = $2 }
	     $1 == "destroy" { x = $2 } END { print k, c, d, x }'
}

results=$(mktemp)
trap 'rm -f "$results"' EXIT
for round in $(seq 1 "$ROUNDS"); do
	case $((round % 3)) in
	1) c=$(run_c); h=$(run_handler); a=$(run_async) ;;
	2) h=$(run_handler); a=$(run_async); c=$(run_c) ;;
	0) a=$(run_async); c=$(run_c); h=$(run_handler) ;;
	esac
	echo "round $round: create/connect/disconnect/destroy ms: C $c, Rust handler $h, Rust async $a" >&2
	echo "$c $h $a" >>"$results"
done

python3 - "$results" "$CONNS" "$ROUNDS" <<'PY'
import statistics, sys
rows = [list(map(float, line.split())) for line in open(sys.argv[1])]
conns, rounds = sys.argv[2], sys.argv[3]
print(f"ibcm-cmtime (C ABI) vs examples/cmtime.rs (Rust API: --api handler, "
      f"ib_cm::handler; --api async, ib_cm::aio on tokio), {conns} connections, "
      f"loop0 -> loop1, {rounds} rounds alternating; total(ms) medians (min-max):")
print("| phase | C | Rust handler | handler / C | Rust async | async / C |")
print("|---|---|---|---|---|---|")
def cell(v):
    return f"{statistics.median(v):.1f} ({min(v):.1f}-{max(v):.1f})"
for k, phase in enumerate(["create id", "connect", "disconnect", "destroy"]):
    c, h, a = ([r[4 * tool + k] for r in rows] for tool in range(3))
    cm = statistics.median(c)
    print(f"| {phase} | {cell(c)} | {cell(h)} | {statistics.median(h) / cm:.2f} "
          f"| {cell(a)} | {statistics.median(a) / cm:.2f} |")
PY
