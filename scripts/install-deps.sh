#!/usr/bin/env bash
# Installs what building and testing ib_cm needs on a fresh Debian 12 machine
# that has only Rust, gcc and python: cmake, valgrind, pkg-config, binutils,
# libibverbs-dev (verbs.h for one test), mandoc and groff (man pages),
# tshark (test_pcap_tshark), ibsim, OpenSM and infiniband-diags (the
# simulated InfiniBand fabric), a
# pinned cbindgen, and the rustfmt/clippy components. Idempotent and quiet when
# everything is present.
set -euo pipefail

CBINDGEN_VERSION=0.29.4
need_apt=()
for tool in cmake:cmake valgrind:valgrind pkg-config:pkg-config nm:binutils readelf:binutils \
            mandoc:mandoc groff:groff-base \
            ibsim:ibsim-utils opensm:opensm saquery:infiniband-diags; do
  command -v "${tool%%:*}" >/dev/null 2>&1 || need_apt+=("${tool##*:}")
done
# <infiniband/verbs.h>, for the C test of ib_cm_init_qp_attr.
[ -f /usr/include/infiniband/verbs.h ] || need_apt+=(libibverbs-dev)
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
