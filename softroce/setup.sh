#!/usr/bin/env bash
# Prepares the SoftRoCE VM: host packages, Debian's own kernel (the image behind
# linux-image-amd64, unpacked — not installed — under $SRT_DIR), an uncompressed
# vmlinux for a fast TCG boot, and the initramfs. Idempotent: a second run
# only checks.  SRT_DIR defaults to build/softroce.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
SRT_DIR=${SRT_DIR:-$HERE/../build/softroce}
mkdir -p "$SRT_DIR"
SRT_DIR=$(cd "$SRT_DIR" && pwd)

# librdmacm-dev: interop/xrc-peer.c, VM B's XRC end.
PKGS="qemu-system-x86 busybox-static cpio kmod iproute2 rdma-core ibverbs-providers rdmacm-utils
      librdmacm-dev libibumad3 tshark tcpdump"
missing=()
for p in $PKGS; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "softroce: apt-get install ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  # tshark asks whether non-root users may capture: no.
  echo "wireshark-common wireshark-common/install-setuid boolean false" | debconf-set-selections
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

IMG=$(apt-cache depends linux-image-amd64 | awk '/Depends: linux-image-[0-9]/{print $2; exit}')
[ -n "$IMG" ] || { apt-get update -qq; IMG=$(apt-cache depends linux-image-amd64 | awk '/Depends: linux-image-[0-9]/{print $2; exit}'); }
KV=${IMG#linux-image-}
KROOT=$SRT_DIR/kernel/root
if [ ! -f "$KROOT/boot/vmlinuz-$KV" ]; then
  echo "softroce: fetching $IMG"
  rm -rf "$SRT_DIR/kernel" && mkdir -p "$SRT_DIR/kernel"
  (cd "$SRT_DIR/kernel" && apt-get download "$IMG" >/dev/null)
  dpkg -x "$SRT_DIR"/kernel/"${IMG}"_*.deb "$KROOT"
  rm -f "$SRT_DIR"/kernel/"${IMG}"_*.deb
  depmod -b "$KROOT" "$KV"
fi
if [ ! -f "$SRT_DIR/kernel/vmlinux-$KV" ]; then
  # Booting the ELF through its PVH note saves TCG the xz decompression (~4 s).
  python3 - "$KROOT/boot/vmlinuz-$KV" "$SRT_DIR/kernel/vmlinux-$KV" <<'PY'
import lzma, sys
data = open(sys.argv[1], "rb").read()
start = data.find(b"\xfd7zXZ\x00")  # Debian's bzImage payload is xz
elf = lzma.LZMADecompressor(format=lzma.FORMAT_XZ).decompress(data[start:])
assert elf[:4] == b"\x7fELF"
open(sys.argv[2], "wb").write(elf)
PY
fi
echo "$KV" > "$SRT_DIR/kernel/version"

# The initramfs: static busybox and the modules that mount the host root over 9p.
INITRD=$SRT_DIR/initramfs.cpio.gz
if [ ! -f "$INITRD" ] || [ "$HERE/initramfs-init.sh" -nt "$INITRD" ]; then
  T=$(mktemp -d)
  trap 'rm -rf "$T"' EXIT
  mkdir -p "$T"/{bin,dev,proc,sys,mnt/lower,mnt/rw,newroot,mods}
  cp /bin/busybox "$T/bin/busybox"
  : > "$T/mods/order"
  # insmod resolves nothing: dependency order.
  for m in fs/netfs/netfs.ko fs/fscache/fscache.ko net/9p/9pnet.ko fs/9p/9p.ko \
           drivers/virtio/virtio_ring.ko drivers/virtio/virtio.ko \
           drivers/virtio/virtio_pci_modern_dev.ko drivers/virtio/virtio_pci_legacy_dev.ko \
           drivers/virtio/virtio_pci.ko net/9p/9pnet_virtio.ko fs/overlayfs/overlay.ko; do
    src=$KROOT/lib/modules/$KV/kernel/$m
    [ -f "$src" ] || continue   # built in, or absent from this kernel
    cp "$src" "$T/mods/" && basename "$m" >> "$T/mods/order"
  done
  cp "$HERE/initramfs-init.sh" "$T/init" && chmod +x "$T/init"
  (cd "$T" && find . | cpio -o -H newc --quiet | gzip -1) > "$INITRD"
fi
echo "softroce: ready (kernel $KV)"
