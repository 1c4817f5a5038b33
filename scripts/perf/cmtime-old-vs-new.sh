#!/usr/bin/env bash
# cmtime-old-vs-new.sh OLD_REV [ROUNDS] [CONNECTIONS]
#
# ibcm-cmtime on the in-process fabric, built from OLD_REV (in a scratch
# worktree, `make run`'s release build) and from this tree, run alternately
# ROUNDS times (default 5) with CONNECTIONS (default 10000) connections.
# Prints each phase's ops/s, the medians and new/old. A benchmark: nothing
# fails on a ratio.
set -euo pipefail
OLD=${1:?usage: cmtime-old-vs-new.sh OLD_REV [ROUNDS] [CONNECTIONS]}
ROUNDS=${2:-5}
N=${3:-10000}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
WT=${IBCM_OLD_TREE:-$ROOT/build/perf/old-$OLD}
if [ ! -x "$WT/build/ibcm-cmtime" ]; then
  [ -d "$WT" ] || git -C "$ROOT" worktree add --detach "$WT" "$OLD" >/dev/null
  make -C "$WT" run CONNECTIONS=10 >/dev/null
fi
make -C "$ROOT" run CONNECTIONS=10 >/dev/null
run() { LD_LIBRARY_PATH=$1/build/stage/lib "$1/build/ibcm-cmtime" -c "$N" | awk '/^phase/ {t = 1; next} t && $1 ~ /^(connect|disconnect|destroy)$/ {print $1, $3} t && $1 == "create" {print $1, $4}'; }
declare -A R
for r in $(seq 1 "$ROUNDS"); do
  for side in old new; do
    tree=$WT; [ $side = new ] && tree=$ROOT
    while read -r phase rate; do R[$side.$phase]+=" $rate"; done < <(run "$tree")
  done
  echo "round $r: old connect${R[old.connect]##* } new connect${R[new.connect]##* }" >&2
done
median() { tr ' ' '\n' | grep . | sort -n | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
printf "%-11s %12s %12s %8s   (%s rounds, %s connections, old %s, new %s)\n" phase "old ops/s" "new ops/s" new/old "$ROUNDS" "$N" \
  "$(git -C "$WT" rev-parse --short HEAD)" "$(git -C "$ROOT" rev-parse --short HEAD)$(git -C "$ROOT" diff --quiet || echo +)"
for phase in create connect disconnect destroy; do
  if [ -z "${R[old.$phase]:-}" ] || [ -z "${R[new.$phase]:-}" ]; then echo "$phase: no figures (a run failed?)"; continue; fi
  o=$(median <<<"${R[old.$phase]}"); n=$(median <<<"${R[new.$phase]}")
  printf "%-11s %12.0f %12.0f %8.3f   old:%s  new:%s\n" "$phase" "$o" "$n" "$(awk -v n="$n" -v o="$o" 'BEGIN {print n / o}')" "${R[old.$phase]}" "${R[new.$phase]}"
done
