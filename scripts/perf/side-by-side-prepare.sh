# Sourced by side-by-side.sh and side-by-side-2vm.sh with their arguments:
# reads -c CONNECTIONS and -r ROUNDS (-h prints lines $USAGE of the script),
# installs what the kernel's side needs (rdma-core's tools, librdmacm-dev for
# the no-QP tool, /usr/bin/time), prepares the VM kernel, and snapshots the
# library and the tools into build/perf/$OUT_NAME: the runs must not change
# under us if someone rebuilds build/stage meanwhile (the tool's RUNPATH gives
# way to LD_LIBRARY_PATH). Sets ROOT, N, ROUNDS and OUT.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
N=1000 ROUNDS=3
while getopts c:r:h opt; do
  case $opt in
    c) N=$OPTARG ;;
    r) ROUNDS=$OPTARG ;;
    *) sed -n "${USAGE}s/^# \{0,1\}//p" "$0"; exit 2 ;;
  esac
done
cd "$ROOT"
OUT=$ROOT/build/perf/$OUT_NAME
rm -rf "$OUT"
mkdir -p "$OUT/bin" "$OUT/lib"

need=()
command -v cmtime >/dev/null || need+=(rdmacm-utils)
[ -f /usr/include/rdma/rdma_cma.h ] || need+=(librdmacm-dev)
[ -f /usr/include/infiniband/umad.h ] || need+=(libibumad-dev)
[ -x /usr/bin/time ] || need+=(time)
if ((${#need[@]})); then
  apt-get install -y -qq "${need[@]}" >/dev/null 2>&1 ||
    { apt-get update -qq && apt-get install -y -qq "${need[@]}" >/dev/null; }
fi
softroce/setup.sh >/dev/null
make -s c-build >/dev/null
cp -L build/stage/lib/libib_cm.so.0 "$OUT/lib/libib_cm.so.0"
# IBCM_LIB_B=DIR (side-by-side-2vm.sh): a second build of the library, run
# in the same boots as this one for a paired comparison; IBCM_ENV_B='K=V ...'
# sets variables for that run only (this tree's library if IBCM_LIB_B is
# unset: the same build two ways).
if [ -n "${IBCM_ENV_B:-}" ] && [ -z "${IBCM_LIB_B:-}" ]; then
  IBCM_LIB_B=build/stage/lib
fi
if [ -n "${IBCM_LIB_B:-}" ]; then
  mkdir -p "$OUT/lib-b"
  cp -L "$IBCM_LIB_B/libib_cm.so.0" "$OUT/lib-b/libib_cm.so.0"
  { git -C "$IBCM_LIB_B" rev-parse --short HEAD 2>/dev/null || echo "$IBCM_LIB_B"
    [ -z "${IBCM_ENV_B:-}" ] || echo "with $IBCM_ENV_B"; } | paste -sd' ' > "$OUT/lib-b/commit"
fi
cp build/c/ibcm-cmtime "$OUT/bin/ibcm-cmtime"
cc -O2 -Wall -Wextra -Werror -o "$OUT/bin/rdmacm-cmtime-noqp" tools/rdmacm-cmtime-noqp.c -lrdmacm -lpthread
cp build/c/umad-floor "$OUT/bin/umad-floor"
{ git -C "$ROOT" rev-parse --short HEAD; git -C "$ROOT" status --short; } > "$OUT/commit" 2>/dev/null || true
