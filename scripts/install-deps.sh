#!/usr/bin/env bash
# Installs what building and testing ib_cm needs on a fresh Debian 12 machine
# that has only Rust, gcc and python: cmake, valgrind, pkg-config, binutils,
# libibverbs-dev (verbs.h for one test), libclang-dev (bindgen, for feature
# sideway), mandoc and groff (man pages),
# tshark (test_pcap_tshark), dpkg-dev, lintian and a systemd-sysusers (make
# deb, deb-check), ibsim, OpenSM and infiniband-diags (the simulated
# InfiniBand fabric), strace (ibfabric.daemon-faults' fault injection), gnuplot (make ibscale's
# plot), an ibsim for the all-to-all (built under
# build/ from third_party/, see build_ibsim below), a pinned cbindgen, and the rustfmt/clippy components. Idempotent and quiet when
# everything is present.
set -euo pipefail

CBINDGEN_VERSION=0.29.4
need_apt=()
for tool in cmake:cmake valgrind:valgrind pkg-config:pkg-config nm:binutils readelf:binutils \
            mandoc:mandoc groff:groff-base \
            dpkg-gensymbols:dpkg-dev lintian:lintian systemd-sysusers:systemd-standalone-sysusers \
            ibsim:ibsim-utils opensm:opensm saquery:infiniband-diags strace:strace \
            gnuplot:gnuplot-nox; do
  command -v "${tool%%:*}" >/dev/null 2>&1 || need_apt+=("${tool##*:}")
done
# <infiniband/verbs.h>, for the C test of ib_cm_init_qp_attr.
[ -f /usr/include/infiniband/verbs.h ] || need_apt+=(libibverbs-dev)
# libclang for bindgen: feature sideway's rdma-mummy-sys (cmake, above, builds
# its C shim), which make softroce builds for examples/rc_pingpong.rs.
compgen -G '/usr/lib/llvm-*/lib/libclang.so' >/dev/null || need_apt+=(libclang-dev)
# libibmad/libibumad headers: building ibsim for the all-to-all.
[ -f /usr/include/infiniband/mad.h ] || need_apt+=(libibmad-dev)
[ -f /usr/include/infiniband/umad.h ] || need_apt+=(libibumad-dev)
# tshark: test_pcap_tshark dissects the library's own capture with it (it
# skips without it); installed here so that the first c-check runs it.
command -v tshark >/dev/null 2>&1 || need_apt+=(tshark)
if ((${#need_apt[@]})); then
  sudo=""; [ "$(id -u)" = 0 ] || sudo="sudo"
  echo "install-deps: apt-get install ${need_apt[*]}"
  # tshark's package asks whether non-root users may capture: no, unasked.
  echo "wireshark-common wireshark-common/install-setuid boolean false" | $sudo debconf-set-selections
  $sudo apt-get update -qq
  # env after sudo: sudo would drop DEBIAN_FRONTEND from the environment.
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi

# ibsim for the all-to-alls (make ibscale, ibfabric.fat64-drops): Debian's
# ibsim 0.10 serves at most 10 clients (IBSIM_MAX_CLIENTS, a compile-time
# constant), and one CM process per HCA on up to 128 HCAs plus OpenSM needs
# 129. The same upstream release 0.10 (third_party/ibsim-0.10.tar.gz: `git
# archive` of linux-rdma/ibsim's tag ibsim-0.10, commit c7e430dc; Debian's
# source tarball is not reachable from here) is built under build/ with
# IBSIM_MAX_CLIENTS=256, the only change (its clients are select()ed: 256
# sockets stay far below FD_SETSIZE). build/ibsim/max-clients says which
# build is there: another value is built again. Debian's libumad2sim.so (the
# client side, which has no such limit) stays.
IBSIM_MAX_CLIENTS=256
build_ibsim() {
  local root tarball sha src out
  root=$(cd "$(dirname "$0")/.." && pwd)
  tarball=$root/third_party/ibsim-0.10.tar.gz
  sha=59f5ba98253ca7c2a7fa166deb3e75e3c2b92cb4698d9e595a6e137ba2167688
  out=$root/build/ibsim
  [ -x "$out/ibsim" ] && [ "$(cat "$out/max-clients" 2>/dev/null)" = $IBSIM_MAX_CLIENTS ] && return 0
  echo "install-deps: building ibsim 0.10 with IBSIM_MAX_CLIENTS=$IBSIM_MAX_CLIENTS in $out"
  echo "$sha  $tarball" | sha256sum --quiet -c -
  rm -rf "$out" && mkdir -p "$out"
  tar -xzf "$tarball" -C "$out"
  src=$out/ibsim-0.10
  sed -i "s/^#define IBSIM_MAX_CLIENTS 10\$/#define IBSIM_MAX_CLIENTS $IBSIM_MAX_CLIENTS/" "$src/include/ibsim.h"
  grep -qx "#define IBSIM_MAX_CLIENTS $IBSIM_MAX_CLIENTS" "$src/include/ibsim.h"
  cc -O2 -w -I"$src/include" -I"$src/ibsim" "$src"/ibsim/*.c -o "$out/ibsim.tmp" \
    -libmad -libumad -lpthread
  mv "$out/ibsim.tmp" "$out/ibsim"
  echo $IBSIM_MAX_CLIENTS > "$out/max-clients"
}
build_ibsim

if ! cbindgen --version 2>/dev/null | grep -qx "cbindgen $CBINDGEN_VERSION"; then
  echo "install-deps: cargo install cbindgen $CBINDGEN_VERSION"
  cargo install --quiet --locked cbindgen --version "$CBINDGEN_VERSION"
fi

for component in rustfmt clippy; do
  if ! cargo "${component/rustfmt/fmt}" --version >/dev/null 2>&1; then
    echo "install-deps: rustup component add $component"
    rustup component add "$component"
  fi
done
