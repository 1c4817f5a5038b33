#!/usr/bin/env bash
# The packages of `make deb` as a user gets them: installs build/deb/*.deb on
# this machine with apt-get, builds the README's example against them with
# nothing but `cc prog.c $(pkg-config --cflags --libs ib_cm)` (no PREFIX, no
# rpath; and once more against libib_cm.a), runs both on loop0/loop1, then
# purges the packages and checks that the machine is as it was: no file of
# theirs left, the same users and groups, the same systemd state.
#
# The packages create the user ibcmd and the group ibcm (ibcmd's postinst) and,
# as Debian's policy asks, keep them on purge; this check removes them again
# when they were not there before it ran.
#
# Machine-wide state lives in $IBCM_DEB_CHECK_STATE (/var/tmp/ib_cm-deb-check)
# while the packages may be installed: a run that died halfway leaves it, and
# the next run first puts the machine back from it. Packages of ours installed
# by someone else (no such state) are left alone: the check stops instead.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
debs=$root/build/deb
readme=${IBCM_README:-$root/README.md}
example=$root/c-tests/readme_example.c
state=${IBCM_DEB_CHECK_STATE:-/var/tmp/ib_cm-deb-check}
pkgs=(libib-cm0 libib-cm-dev ibcmd)
accounts=(passwd:ibcmd group:ibcm group:ibcmd) # what ibcmd.conf makes
sudo=""
[ "$(id -u)" = 0 ] || sudo="sudo"

fail() {
  echo "deb-check: $*" >&2
  exit 1
}

# Logs and the example's build, this run's own.
work=$(mktemp -d)
on_exit() {
  local status=$?
  if [ -f "$state/before" ] && [ -z "${restoring:-}" ]; then
    echo "deb-check: failed: purging" >&2
    restore || status=1
  fi
  rm -rf "$work"
  exit "$status"
}
trap on_exit EXIT

# (Commands whose output grep -q reads are run first: grep -q stops reading at
# the first match, and under pipefail the writer's SIGPIPE fails the test.)

# ---- the README's example is c-tests/readme_example.c ------------------------

# The first ```c block under "## Using it".
readme_example() {
  awk '/^## Using it/ { in_section = 1; next }
       in_section && /^## / { exit }
       in_section && /^```c$/ { in_block = 1; next }
       in_block && /^```$/ { exit }
       in_block { print }' "$readme"
}
if ! diff -u --label "$readme (## Using it)" --label "$example" <(readme_example) "$example"; then
  fail "the README's example differs from $example: change both"
fi

# ---- what the machine was ----------------------------------------------------

deb_files=("$debs"/libib-cm0_*.deb "$debs"/libib-cm-dev_*.deb "$debs"/ibcmd_*.deb)
for f in "${deb_files[@]}"; do [ -f "$f" ] || fail "no $f: run make deb"; done

installed() { # the packages of ours dpkg knows in any state but not-installed
  local pkg status
  for pkg in "${pkgs[@]}"; do
    status=$(dpkg-query -W -f='${db:Status-Abbrev}' "$pkg" 2>/dev/null || true)
    case "$status" in "" | un* | pn*) ;; *) echo "$pkg" ;; esac
  done
}

# Every path the packages hold, directories included, one a line.
package_paths() {
  local f
  for f in "${deb_files[@]}"; do dpkg-deb --fsys-tarfile "$f" | tar -t; done |
    sed -e 's|^\./|/|' -e 's|/$||' | grep -v '^$' | grep -vx '/' | LC_ALL=C sort -u
}

# The machine's state the packages may touch, as text to compare ($state/paths:
# the packages' paths, recorded before they are installed).
snapshot() {
  local entry file dir path p
  for entry in "${accounts[@]}"; do
    if getent "${entry%%:*}" "${entry#*:}" >/dev/null; then echo "exists ${entry}"; fi
  done
  for file in passwd group shadow gshadow; do
    $sudo cut -d: -f1 "/etc/$file" | LC_ALL=C sort | sed "s/^/$file /"
  done
  (cd / && sha256sum etc/passwd etc/group)
  for dir in /etc/systemd /var/lib/systemd/deb-systemd-helper-enabled \
    /var/lib/systemd/deb-systemd-helper-masked; do
    if [ -d "$dir" ]; then find "$dir"; fi
  done | LC_ALL=C sort
  find /var/lib/dpkg/info -name 'libib-cm*' -o -name 'ibcmd.*' | LC_ALL=C sort
  while read -r path; do
    for p in "$path" "$path.dpkg-new" "$path.dpkg-tmp"; do
      if [ -e "$p" ] || [ -L "$p" ]; then echo "path $p"; fi
    done
  done <"$state/paths"
}

# ---- putting it back ---------------------------------------------------------

# Purges whatever of ours dpkg knows (in any state), removes the accounts the
# packages made, and checks the machine against the recorded snapshot.
restore() {
  local left entry
  restoring=1
  left=$(installed)
  if [ -n "$left" ]; then
    # shellcheck disable=SC2086
    $sudo env DEBIAN_FRONTEND=noninteractive dpkg --purge --force-remove-reinstreq $left \
      >"$work/dpkg.log" 2>&1 || { cat "$work/dpkg.log" >&2; fail "dpkg --purge $left failed"; }
  fi
  # A dpkg killed while unpacking leaves PATH.dpkg-new (or .dpkg-tmp) files
  # that it never listed as the package's, so purge leaves them, and their
  # directories.
  while read -r path; do
    $sudo rm -f "$path.dpkg-new" "$path.dpkg-tmp"
  done <"$state/paths"
  LC_ALL=C sort -r "$state/paths" | while read -r path; do
    if [ -d "$path" ] && [ ! -L "$path" ] && ! grep -qxF "path $path" "$state/before"; then
      $sudo rmdir "$path" 2>/dev/null || true
    fi
  done
  for entry in "${accounts[@]}"; do
    grep -qx "exists $entry" "$state/before" && continue
    case "$entry" in
    passwd:*) ! getent passwd "${entry#*:}" >/dev/null || $sudo userdel "${entry#*:}" ;;
    group:*) ! getent group "${entry#*:}" >/dev/null || $sudo groupdel "${entry#*:}" ;;
    esac
  done
  if ! diff -u --label before --label after "$state/before" <(snapshot); then
    fail "the machine is not as it was before the packages (diff above); the record stays in $state"
  fi
  $sudo rm -rf "$state"
  restoring=""
}

if [ -f "$state/before" ]; then
  echo "deb-check: a previous run stopped halfway: putting the machine back first"
  restore
fi
if [ -n "$(installed)" ]; then
  fail "$(installed | tr '\n' ' ')installed, not by deb-check: remove them first (apt-get purge)"
fi
$sudo rm -rf "$state"
$sudo mkdir -p "$state"
package_paths | $sudo tee "$state/paths" >/dev/null
snapshot | $sudo tee "$state/before.tmp" >/dev/null
$sudo mv "$state/before.tmp" "$state/before" # from here on, restore() puts it back
# ---- install -----------------------------------------------------------------

# apt-get may bring only ours: anything else it would install stays after the
# purge (scripts/install-deps.sh installs what the packages depend on).
apt_install=(env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${deb_files[@]}")
others=$($sudo "${apt_install[@]}" -s 2>/dev/null | awk '/^Inst /{print $2}' |
  grep -vxE 'libib-cm0|libib-cm-dev|ibcmd' || true)
[ -z "$others" ] || fail "apt-get would also install: $others (scripts/install-deps.sh should)"
$sudo "${apt_install[@]}" -qq >"$work/apt.log" 2>&1 || { cat "$work/apt.log" >&2; fail "apt-get install failed"; }
for pkg in "${pkgs[@]}"; do
  [ "$(dpkg-query -W -f='${db:Status-Abbrev}' "$pkg")" = "ii " ] || fail "$pkg is not installed"
done
version=$(dpkg-query -W -f='${Version}' libib-cm0)
multiarch=$(dpkg-architecture -qDEB_HOST_MULTIARCH)
echo "deb-check: installed ${pkgs[*]} $version"

# What the postinst and the triggers did.
if ! getent group ibcm >/dev/null || ! getent passwd ibcmd >/dev/null; then
  fail "no user ibcmd or group ibcm after install"
fi
# (/lib is /usr/lib: the cache may name either.)
grep -qE "libib_cm.so.0 .*=> (/usr)?/lib/$multiarch/libib_cm.so.0\$" <<<"$(ldconfig -p)" ||
  fail "ldconfig does not know /usr/lib/$multiarch/libib_cm.so.0"
[ "$(pkg-config --variable=libdir ib_cm)" = "/usr/lib/$multiarch" ] || fail "ib_cm.pc: libdir is not /usr/lib/$multiarch"
case "$(/usr/sbin/ibcmd --help 2>&1 || true)" in "usage: ibcmd "*) ;; *) fail "/usr/sbin/ibcmd does not run" ;; esac
if command -v systemd-analyze >/dev/null; then
  verify=$(systemd-analyze verify ibcmd.socket ibcmd.service 2>&1 || true)
  if grep -q ibcmd <<<"$verify"; then echo "$verify" >&2; fail "systemd-analyze verify: the units of ibcmd"; fi
fi
if command -v man >/dev/null; then
  for page in ib_send_cm_dreq.3 ib_cm.7 ibcmd.8; do
    [ "$(man -w "${page##*.}" "${page%.*}")" = "/usr/share/man/man${page##*.}/$page.gz" ] ||
      fail "man -w ${page##*.} ${page%.*}: not the packaged page"
  done
fi

# ---- the README's example, as a user builds it -------------------------------

cp "$example" "$work/prog.c"
build_and_run() { # NAME LINK-FLAGS...
  local name=$1
  shift
  (cd "$work" && env -u PKG_CONFIG_PATH -u LIBRARY_PATH -u CPATH -u C_INCLUDE_PATH \
    cc -Wall -Wextra -Werror -o "$name" prog.c "$@")
  if grep -qE 'RPATH|RUNPATH' <<<"$(readelf -d "$work/$name")"; then fail "$name has an rpath"; fi
  env -u LD_LIBRARY_PATH timeout 60 "$work/$name" >"$work/$name.out" 2>&1 ||
    { cat "$work/$name.out" >&2; fail "$name failed"; }
  grep -qx 'disconnected' "$work/$name.out" || { cat "$work/$name.out" >&2; fail "$name did not disconnect"; }
  echo "deb-check: $name: $(tr '\n' ';' <"$work/$name.out")"
}
# shellcheck disable=SC2046 # the README's command, word splitting and all
build_and_run prog $(env -u PKG_CONFIG_PATH pkg-config --cflags --libs ib_cm)
grep -qE "libib_cm.so.0 => (/usr)?/lib/$multiarch/libib_cm.so.0 " <<<"$(ldd "$work/prog")" ||
  fail "prog does not use the packaged libib_cm.so.0"
# libib_cm.a with Libs.private (pkg-config --static).
# shellcheck disable=SC2046
build_and_run prog-static $(env -u PKG_CONFIG_PATH pkg-config --cflags ib_cm) \
  -Wl,-Bstatic -lib_cm -Wl,-Bdynamic $(env -u PKG_CONFIG_PATH pkg-config --static --libs-only-l ib_cm | sed 's/-lib_cm//')
if grep -q libib_cm <<<"$(ldd "$work/prog-static")"; then fail "prog-static uses libib_cm.so"; fi

# ---- purge and compare -------------------------------------------------------

$sudo env DEBIAN_FRONTEND=noninteractive apt-get purge -y -qq "${pkgs[@]}" >"$work/apt.log" 2>&1 ||
  { cat "$work/apt.log" >&2; fail "apt-get purge failed"; }
restore
echo "deb-check: purged; no file, account or unit state of the packages left"

# ---- lintian, where installed ------------------------------------------------

# initial-upload-closes-no-bugs: about uploads to Debian's archive, not these.
if command -v lintian >/dev/null; then
  lintian --fail-on error,warning --suppress-tags initial-upload-closes-no-bugs "${deb_files[@]}" \
    2> >(grep -v '^running with root privileges is not recommended!$' >&2)
  echo "deb-check: lintian: no error or warning"
else
  echo "deb-check: lintian not installed, skipped"
fi
