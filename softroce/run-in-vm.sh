#!/usr/bin/env bash
# run-in-vm.sh [--ibcm] [--timeout S] [--keep] -- 'COMMAND LINE'
#
# Boots Debian's kernel under QEMU (TCG: KVM does not work on these machines)
# with the host's root filesystem read-only plus a throw-away overlay, sets up
# rxe0/rxe1 on a veth pair (ib_umad loaded; the kernel CM only with --ibcm),
# runs the command as root in the caller's directory, prints its stdout and
# stderr, and exits with its status (124: timed out, 125: the VM died).
# $SRT_JOB inside the guest is a writable directory kept on the host with --keep.
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
SRT_DIR=${SRT_DIR:-$HERE/../build/softroce}
SRT_DIR=$(cd "$SRT_DIR" 2>/dev/null && pwd) || { echo "run-in-vm: run softroce/setup.sh first" >&2; exit 2; }
KV=$(cat "$SRT_DIR/kernel/version")
IBCM=0 TIMEOUT=1200 KEEP=0
while (($#)); do
  case "$1" in
    --ibcm) IBCM=1 ;;
    --timeout) TIMEOUT=$2; shift ;;
    --keep) KEEP=1 ;;
    --) shift; break ;;
    *) echo "run-in-vm: unknown option $1" >&2; exit 2 ;;
  esac
  shift
done
(($#)) || { echo "run-in-vm: no command" >&2; exit 2; }
JOB=$(mktemp -d /tmp/ibcm-vm.XXXXXX)
printf 'cd %q || exit 126\nexport SRT_JOB=/job SRT_IN_VM=1\n%s\n' "$PWD" "$*" > "$JOB/cmd"
printf 'SRT_KROOT=%q\nSRT_KV=%q\nSRT_IBCM=%q\n' "$SRT_DIR/kernel/root" "$KV" "$IBCM" > "$JOB/env"
start=$(date +%s.%N)
timeout -k 5 "$TIMEOUT" qemu-system-x86_64 -accel tcg -m 1024 -smp 1 -nographic -no-reboot \
  -display none -monitor none -serial "file:$JOB/console.log" \
  -kernel "$SRT_DIR/kernel/vmlinux-$KV" -initrd "$SRT_DIR/initramfs.cpio.gz" \
  -append "console=ttyS0 panic=-1 quiet loglevel=4 srt_stage2=$HERE/guest.sh" \
  -virtfs "local,path=/,mount_tag=hostroot,security_model=none,readonly=on,multidevs=remap" \
  -virtfs "local,path=$JOB,mount_tag=job,security_model=none" \
  -nic none > "$JOB/qemu.log" 2>&1
qrc=$?
end=$(date +%s.%N)
cat "$JOB/stdout" 2>/dev/null
cat "$JOB/stderr" >&2 2>/dev/null
boot=$(awk '/rdma ready/{print $1; exit}' "$JOB/timings" 2>/dev/null)
printf 'run-in-vm: VM wall %.1f s, guest ready at %s s uptime\n' "$(echo "$end - $start" | bc)" "${boot:-?}" >&2
if [ $qrc = 124 ] || [ $qrc = 137 ]; then echo "run-in-vm: timed out after ${TIMEOUT}s ($JOB)" >&2; exit 124; fi
if [ ! -f "$JOB/rc" ]; then
  echo "run-in-vm: the VM died (qemu rc=$qrc); console:" >&2
  tail -n 30 "$JOB/console.log" >&2; cat "$JOB/qemu.log" >&2; exit 125
fi
rc=$(cat "$JOB/rc")
[ $KEEP = 1 ] && echo "run-in-vm: job dir $JOB" >&2 || rm -rf "$JOB"
exit "$rc"
