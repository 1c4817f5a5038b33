#!/bin/busybox sh
# Stage 1, PID 1 in the initramfs: mount the host's root read-only over 9p with
# a tmpfs overlay on top, mount the job directory, and switch to stage 2
# ($srt_stage2, a host path passed on the kernel command line).
/bin/busybox --install -s /bin
export PATH=/bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
for m in $(cat /mods/order); do insmod /mods/$m || echo "[stage1] insmod $m failed"; done
fail() { echo "[stage1] FATAL: $*"; echo o > /proc/sysrq-trigger; sleep 5; poweroff -f; }
mount -t 9p -o trans=virtio,version=9p2000.L,ro,msize=512000,cache=loose hostroot /mnt/lower || fail hostroot
mount -t tmpfs -o size=1g,mode=0755 tmpfs /mnt/rw || fail tmpfs
mkdir -p /mnt/rw/upper /mnt/rw/work
mount -t overlay overlay -o lowerdir=/mnt/lower,upperdir=/mnt/rw/upper,workdir=/mnt/rw/work /newroot || fail overlay
mkdir -p /newroot/job
mount -t 9p -o trans=virtio,version=9p2000.L,msize=512000 job /newroot/job || fail job
mount --move /proc /newroot/proc
mount --move /sys /newroot/sys
mount --move /dev /newroot/dev
exec switch_root /newroot /bin/bash "${srt_stage2}"
