#!/usr/bin/env bash
# run-in-vm.sh [--ibcm] [--timeout S] [--keep] [--job DIR] [--env K=V]...
#              [--netdev SPEC --nic-ip ADDR/LEN [--no-veth]] -- 'COMMAND LINE'
#
# Boots Debian's kernel under QEMU (TCG: KVM does not work on these machines)
# with the host's root filesystem read-only plus a throw-away overlay, sets up
# rxe0/rxe1 on a veth pair (ib_umad loaded; the kernel CM only with --ibcm),
# runs the command as root in the caller's directory, prints its stdout and
# stderr, and exits with its status (124: timed out, 125: the VM died).
# $SRT_JOB inside the guest is a writable directory kept on the host with --keep
# (or given with --job, which is never removed).
#
# Two VMs (softroce/run-2vm.sh): --netdev gives the guest a virtio NIC on that
# QEMU -netdev backend, --nic-ip its address, and rxe0 is put on it; with
# --no-veth there is no veth pair (so no rxe1). --env exports K=V to the command.
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
SRT_DIR=${SRT_DIR:-$HERE/../build/softroce}
SRT_DIR=$(cd "$SRT_DIR" 2>/dev/null && pwd) || { echo "run-in-vm: run softroce/setup.sh first" >&2; exit 2; }
KV=$(cat "$SRT_DIR/kernel/version")
IBCM=0 TIMEOUT=1200 KEEP=0 JOB="" NETDEV="" NIC_IP="" VETH=1 ENVS=()
while (($#)); do
  case "$1" in
    --ibcm) IBCM=1 ;;
    --timeout) TIMEOUT=$2; shift ;;
    --keep) KEEP=1 ;;
    --job) JOB=$2; KEEP=1; shift ;;
    --netdev) NETDEV=$2; shift ;;
    --nic-ip) NIC_IP=$2; shift ;;
    --no-veth) VETH=0 ;;
    --env) ENVS+=("$2"); shift ;;
    --) shift; break ;;
    *) echo "run-in-vm: unknown option $1" >&2; exit 2 ;;
  esac
  shift
done
(($#)) || { echo "run-in-vm: no command" >&2; exit 2; }
if [ -n "$JOB" ]; then mkdir -p "$JOB"; else JOB=$(mktemp -d /tmp/ibcm-vm.XXXXXX); fi
{
  printf 'cd %q || exit 126\nexport SRT_JOB=/job SRT_IN_VM=1\n' "$PWD"
  for e in "${ENVS[@]+"${ENVS[@]}"}"; do printf 'export %q=%q\n' "${e%%=*}" "${e#*=}"; done
  printf '%s\n' "$*"
} > "$JOB/cmd"
printf 'SRT_KROOT=%q\nSRT_KV=%q\nSRT_IBCM=%q\nSRT_VETH=%q\nSRT_NIC_IP=%q\n' \
  "$SRT_DIR/kernel/root" "$KV" "$IBCM" "$VETH" "$NIC_IP" > "$JOB/env"
NIC=(-nic none)
if [ -n "$NETDEV" ]; then
  # A MAC of our own per address, so that two VMs never share one.
  MAC=$(printf '52:54:00:%s' "$(echo -n "$NIC_IP" | md5sum | sed 's/^\(..\)\(..\)\(..\).*/\1:\2:\3/')")
  NIC=(-netdev "$NETDEV,id=n0" -device "virtio-net-pci,netdev=n0,mac=$MAC")
fi
start=$(date +%s.%N)
timeout -k 5 "$TIMEOUT" qemu-system-x86_64 -accel tcg -m 1024 -smp 1 -nographic -no-reboot \
  -display none -monitor none -serial "file:$JOB/console.log" \
  -kernel "$SRT_DIR/kernel/vmlinux-$KV" -initrd "$SRT_DIR/initramfs.cpio.gz" \
  -append "console=ttyS0 panic=-1 quiet loglevel=4 srt_stage2=$HERE/guest.sh" \
  -virtfs "local,path=/,mount_tag=hostroot,security_model=none,readonly=on,multidevs=remap" \
  -virtfs "local,path=$JOB,mount_tag=job,security_model=none" \
  "${NIC[@]}" > "$JOB/qemu.log" 2>&1
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
