#!/usr/bin/env bash
# Bounded fuzz run of every cargo-fuzz target (decode, receive, switch), for
# CI and by hand. Exits non-zero if a target crashes, hangs (-timeout), leaks
# (the receive harness's id/timer checks, -rss_limit_mb), breaks the switch
# harness's matching rule, or fails to build.
#
#   fuzz/run.sh [SECONDS]    decode and receive for SECONDS each (default 30),
#                            switch for SWITCH_RUNS executions (default 10^6,
#                            issue 30's bar; SWITCH_RUNS= : SECONDS as well)
#   RUNS=N fuzz/run.sh       each target for N executions instead
#   TARGETS="receive" fuzz/run.sh
#
# Seeds come from the committed corpus/<target>/ (read only); what a run adds
# goes to corpus-run/<target>/ (git-ignored, reused by the next run). A finding
# is written to artifacts/<target>/ with the command that reproduces it.
#
# Toolchain: cargo-fuzz needs nightly flags. The nightly toolchain is used if
# rustup has it; otherwise the default (stable) one with RUSTC_BOOTSTRAP=1,
# which accepts the same flags. cargo-fuzz is installed from crates.io if it
# is missing.
set -euo pipefail
cd "$(dirname "$0")"

secs=${1:-30}
targets=${TARGETS:-decode receive switch}
switch_runs=${SWITCH_RUNS-1000000}

if cargo +nightly --version >/dev/null 2>&1; then
    cargo=(cargo +nightly)
else
    echo "fuzz: no nightly toolchain; using $(cargo --version) with RUSTC_BOOTSTRAP=1"
    export RUSTC_BOOTSTRAP=1
    cargo=(cargo)
fi
if ! cargo fuzz --version >/dev/null 2>&1; then
    echo "fuzz: installing cargo-fuzz"
    cargo install cargo-fuzz --locked
fi

"${cargo[@]}" fuzz build -O

failed=()
for target in $targets; do
    case $target in
        decode) max_len=512 ;;   # longer than a MAD: parse_header's trailing bytes
        receive) max_len=1036 ;; # 4 records of 3 + 256 bytes
        switch) max_len=512 ;;   # up to 32 operations (ib_cm_fuzz::switch::MAX_OPS)
        *) echo "fuzz: unknown target $target" >&2; exit 2 ;;
    esac
    if [[ -n ${RUNS:-} ]]; then
        limit=(-runs="$RUNS")
        what="$RUNS runs"
    elif [[ $target == switch && -n $switch_runs ]]; then
        limit=(-runs="$switch_runs")
        what="$switch_runs runs"
    else
        limit=(-max_total_time="$secs")
        what="${secs}s"
    fi
    mkdir -p "corpus-run/$target" "artifacts/$target"
    before=$(find "artifacts/$target" -type f | wc -l)
    echo "=== fuzz $target: $what"
    log=$(mktemp)
    set +e
    # The switch logs every MAD it drops: not in a fuzz run.
    quiet=()
    [[ $target == switch ]] && quiet=(env IBCM_LOG="${IBCM_LOG:-error}")
    "${quiet[@]}" "${cargo[@]}" fuzz run -O "$target" "corpus-run/$target" "corpus/$target" -- \
        "${limit[@]}" -max_len="$max_len" -rss_limit_mb=4096 -timeout=10 -print_final_stats=1 \
        2>&1 | tee "$log" | grep -E '^(#[0-9]+[[:space:]]+(pulse|DONE)|Done|stat::|==[0-9]+==|thread .* panicked|SUMMARY|ib_cm_fuzz)'
    status=${PIPESTATUS[0]}
    set -e
    after=$(find "artifacts/$target" -type f | wc -l)
    if ((status != 0 || after > before)); then
        echo "fuzz: $target FAILED (exit $status); last lines of its log:" >&2
        tail -n 60 "$log" >&2
        find "artifacts/$target" -type f -newer "$log" -printf 'fuzz: artifact %p\n' >&2 || true
        failed+=("$target")
    fi
    rm -f "$log"
done

if ((${#failed[@]})); then
    echo "fuzz: findings in: ${failed[*]}" >&2
    exit 1
fi
echo "fuzz: no crash, hang or leak in: $targets"
