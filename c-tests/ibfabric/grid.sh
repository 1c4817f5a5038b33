#!/bin/bash
# make ibscale's grid (issue 33): the all-to-all on fat trees of N HCAs,
# N in $IBCM_GRID_SIZES (default 16 32 64 128), each with
#   off      one CM process an HCA, no path cache (IBCM_PATH_CACHE_TTL_MS=0):
#            one SA query per connection, as rdma_cm without ibacm
#   process  one CM process an HCA, each with its own path cache
#   ibcmd    8 processes an HCA (2 at 128 HCAs) behind one ibcmd each (MPI
#            ranks: each connects to its rank on every other host), the
#            processes' caches and the host's
# every connection resolving its path (ibcm_init_path) right before its REQ,
# inside the timed phase; rounds: 2 with one process an HCA, 1 with 8 (so
# the ibcmd rows have 4x the connections). Then the host cache at 16 HCAs
# with 1, 2, 4 and 8 processes an HCA; then the ibcmd rows again with 10%
# packet loss on one spine's links. Prints one table, writes it and a
# PNG plot (gnuplot) of time to full mesh and SA queries per host against N
# to OUTDIR.
#
#   grid.sh PEER LOGDIR OUTDIR
#   IBCM_GRID_PLOT_ONLY=1 grid.sh PEER LOGDIR OUTDIR   the plot again from OUTDIR/grid.dat
#
# Needs what run.sh's fat* scenarios need, and IBCMD, IBCMD_HARNESS.
set -u
peer=$1 logroot=$2 out=$3
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$out" "$logroot"
sizes=${IBCM_GRID_SIZES:-16 32 64 128}
table=$out/grid.txt data=$out/grid.dat
failed=0

# cell N MODE LANES ROUNDS [-drops]: one run; appends its row to $table and
# $data.
cell() {
    local n=$1 mode=$2 lanes=$3 rounds=$4 drops=${5:-} log rc line all up conns sa mads retries dups fails rate per
    log=$logroot/grid-$n-$mode-$lanes$drops.out
    IBCM_SCALE_MODE=$mode IBFABRIC_MESH_LANES=$lanes IBCM_SCALE_ROUNDS=$rounds \
        IBFABRIC_PATH_PER_CONNECTION=1 IBCM_SCALE_TIMEOUT=600 \
        "$here/run.sh" "$peer" "$logroot" "fat$n$drops" >"$log" 2>&1
    rc=$?
    [ $rc = 77 ] && { echo "grid: fat$n $mode skipped: $(tail -n 1 "$log")"; return; }
    line=$(grep '^scale: ' "$log")
    all=$(grep '^all-to-all on' "$log")
    conns=$(sed -n 's/.* \([0-9]*\) connections, full mesh.*/\1/p' <<<"$line")
    up=$(sed -n 's/.*full mesh in \([0-9]*\) ms.*/\1/p' <<<"$line")
    sa=$(sed -n 's/.*, \([0-9]*\) SA path queries.*/\1/p' <<<"$line")
    per=$(sed -n 's/.*(\([0-9.]*\) per host).*/\1/p' <<<"$line")
    mads=$(sed -n 's/.*; \([0-9]*\) MADs sent.*/\1/p' <<<"$all")
    retries=$(sed -n 's/.* \([0-9]*\) retries.*/\1/p' <<<"$all")
    dups=$(sed -n 's/.* \([0-9]*\) duplicates.*/\1/p' <<<"$all")
    fails=$(sed -n 's/^failed processes: //p' "$log")
    [ $rc = 0 ] || failed=1
    rate=$( [ -n "$up" ] && [ "$up" -gt 0 ] && echo "$conns * 1000 / $up" | bc || echo -)
    printf '%5s  %-8s %3s  %7s  %9s  %9s  %8s  %8s  %9s  %7s  %6s  %5s%s\n' \
        "$n" "$mode${drops:+ 10%}" "$lanes" "${conns:-?}" "${up:-?}" "$rate" "${sa:-?}" "${per:-?}" "${mads:-?}" \
        "${retries:-?}" "${dups:-?}" "${fails:-?}" "$( [ $rc = 0 ] || echo "  (rc $rc: $log)")" | tee -a "$table"
    echo "$n $mode$drops $lanes ${up:-0} ${per:-0}" >>"$data"
}

# IBCM_GRID_PLOT_ONLY=1: only the plot, from OUTDIR's grid.dat of a run.
if [ "${IBCM_GRID_PLOT_ONLY:-0}" != 1 ]; then
: >"$table"
: >"$data"
printf '%5s  %-8s %3s  %7s  %9s  %9s  %8s  %8s  %9s  %7s  %6s  %5s\n' N cache P connections \
    "mesh (ms)" "conn/s" "SA qs" "SA/host" "CM MADs" retries dups fails | tee -a "$table"
for n in $sizes; do
    cell "$n" off 1 2
    cell "$n" process 1 2
    # 128 HCAs x 8 processes (1,024 CM processes, 128 ibcmd, 65,024
    # connections) overwhelm one ibsim on this 2-core machine: umad2sim's
    # sends to it were refused (ECONNREFUSED, 148 of them) and DREQs went
    # unanswered for 60 s; with 4, once, every daemon stopped: umad2sim
    # holds one mutex over its write() to ibsim (and over every poll() of
    # the process), ibsim's socket was full, and ibsim waited for the
    # daemon's reader, which waited for that mutex. 2 processes an HCA there.
    cell "$n" ibcmd "$([ "$n" -ge 128 ] && echo 2 || echo 8)" 1
done
echo "The host cache, 16 HCAs: SA queries per host whatever the processes an HCA" | tee -a "$table"
for p in 1 2 4; do cell 16 ibcmd "$p" 1; done
# With 10% loss on Spine1's links (run.sh's fatN-drops): the host cache's
# misses stay <= N-1 (run.sh checks), no connection fails. IBCM_GRID_DROPS=0
# leaves these rows out.
if [ "${IBCM_GRID_DROPS:-1}" = 1 ]; then
    echo "With drops (10% on Spine1's links): no connection may fail" | tee -a "$table"
    # 128 HCAs x 2 with drops: ibsim stopped answering half way (the
    # umad2sim deadlock above, with the retries' load): 1 process an HCA.
    for n in $sizes; do
        cell "$n" ibcmd "$([ "$n" -ge 128 ] && echo 1 || echo 8)" 1 -drops
    done
fi

fi

if command -v gnuplot >/dev/null 2>&1; then
    gnuplot <<EOF
set terminal pngcairo size 1100,450 font ",10"
set output "$out/grid.png"
set multiplot layout 1,2 title "All-to-all on fat trees of N HCAs (ibsim, OpenSM; make ibscale)"
set logscale x 2
set xrange [13:160]
set xtics (16, 32, 64, 128)
set xlabel "HCAs (N)"
set key top left
set grid
set ylabel "time to full mesh (ms)"
plot "< awk '\$2 == \"off\" && \$3 == 1' $data" using 1:4 with linespoints title "no cache (1 process/HCA)", \
     "< awk '\$2 == \"process\"' $data" using 1:4 with linespoints title "per-process cache (1/HCA)", \
     "< awk '\$2 == \"ibcmd\" && (\$3 == 8 || \$1 == 128)' $data" using 1:4 with linespoints title "ibcmd cache (8/HCA; 2 at 128)"
set ylabel "SA path queries per host"
set logscale y 2
plot "< awk '\$2 == \"off\" && \$3 == 1' $data" using 1:5 with linespoints title "no cache (1 process/HCA)", \
     "< awk '\$2 == \"process\"' $data" using 1:5 with linespoints title "per-process cache (1/HCA)", \
     "< awk '\$2 == \"ibcmd\" && (\$3 == 8 || \$1 == 128)' $data" using 1:5 with linespoints title "ibcmd cache (8/HCA; 2 at 128)", \
     x - 1 with lines dashtype 2 title "N - 1"
unset multiplot
EOF
    echo "grid: $table, $out/grid.png"
else
    echo "grid: $table (no gnuplot: no plot)"
fi
[ $failed = 0 ]
