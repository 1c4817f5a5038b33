#!/usr/bin/env bash
# interop/run.sh [-R REGEX] — the two-VM interoperability suite.
#
# Boots two QEMU VMs on one virtual Ethernet link (softroce/run-2vm.sh), each
# with rxe0 on its NIC: VM A (10.78.0.1) runs libib_cm, the kernel's ib_cm not
# loaded; VM B (10.78.0.2) runs the kernel CM (ib_cm, rdma_cm, rdma_ucm) and
# interop/agent.py. In A, CTest runs the scenarios (label interop, each
# interop/scenarios/*.sh with a verdict); they drive rdma-core's tools in B
# through the agent. -R passes a regular expression to ctest.
#
# Captures (tcpdump in A, UDP 4791) and logs land in build/interop/.
# Exit status: ctest's in A (0: every scenario passed).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
FILTER=()
while getopts R:h opt; do
  case $opt in
    R) FILTER=(-R "$OPTARG") ;;
    *) sed -n '2,13s/^# \{0,1\}//p' "$0"; exit 2 ;;
  esac
done
cd "$ROOT"
softroce/setup.sh
make -s c-build >/dev/null
OUT=$ROOT/build/interop
rm -rf "$OUT" && mkdir -p "$OUT"
A_CMD="cd $ROOT/build/c && ctest -V --no-tests=error -L interop ${FILTER[*]:+$(printf '%q ' "${FILTER[@]}")}; rc=\$?
python3 $ROOT/interop/bctl.py quit > /dev/null 2>&1 || true
exit \$rc"
B_CMD="exec python3 $ROOT/interop/agent.py"
set +e
softroce/run-2vm.sh --b-ibcm --timeout 1800 --jobs "$OUT/vm" "$A_CMD" "$B_CMD" | tee "$OUT/run.log"
rc=${PIPESTATUS[0]}
set -e
cp "$OUT"/vm/a/interop/* "$OUT"/ 2>/dev/null || true
echo "interop: captures and logs in $OUT (rc=$rc)"
exit "$rc"
