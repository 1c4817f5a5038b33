#!/usr/bin/env bash
# The Rust API against the C ABI on the same engine (issue 32): ibcm-cmtime
# (tools/ibcm-cmtime.c, through libib_cm.so) and examples/cmtime.rs (through
# ib_cm::aio), alternating in one run, on the in-process fabric (loop0 →
# loop1). Prints each round's totals, then per phase the medians, their
# ranges and the ratio Rust / C of the medians, as a Markdown table (the
# issue's target: at most 1.05 in connect and disconnect).
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

# "connect disconnect" total(ms) of one run's table.
totals() {
	awk '$1 == "connect" { c = $2 } $1 == "disconnect" { d = $2 } END { print c, d }'
}

results=$(mktemp)
trap 'rm -f "$results"' EXIT
for round in $(seq 1 "$ROUNDS"); do
	c=$(LD_LIBRARY_PATH="$STAGE/lib" "${C_TOOL[@]}" 2>/dev/null | totals)
	r=$("${RUST_TOOL[@]}" 2>/dev/null | totals)
	echo "round $round: C connect/disconnect $c ms, Rust $r ms" >&2
	echo "$c $r" >>"$results"
done

python3 - "$results" "$CONNS" "$ROUNDS" <<'PY'
import statistics, sys
rows = [list(map(float, line.split())) for line in open(sys.argv[1])]
conns, rounds = sys.argv[2], sys.argv[3]
print(f"ibcm-cmtime (C ABI) vs examples/cmtime.rs (Rust API, ib_cm::aio), "
      f"{conns} connections, loop0 -> loop1, {rounds} rounds alternating; "
      f"total(ms) medians (min-max):")
print(f"| phase | C total(ms) | Rust total(ms) | Rust / C |")
print(f"|---|---|---|---|")
for k, phase in enumerate(["connect", "disconnect"]):
    c = [r[k] for r in rows]
    rust = [r[2 + k] for r in rows]
    cm, rm = statistics.median(c), statistics.median(rust)
    print(f"| {phase} | {cm:.1f} ({min(c):.1f}-{max(c):.1f}) "
          f"| {rm:.1f} ({min(rust):.1f}-{max(rust):.1f}) | {rm / cm:.2f} |")
PY
