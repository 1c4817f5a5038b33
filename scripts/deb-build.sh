#!/usr/bin/env bash
# Builds the Debian packages of ib_cm under build/deb/, in rdma-core's split:
#   libib-cm0     libib_cm.so.0 (and its symbols file, from libib_cm.map)
#   libib-cm-dev  the headers, libib_cm.so, libib_cm.a, ib_cm.pc (the
#                 multiarch libdir, no rpath), the section-3 pages, ib_cm(7)
#   ibcmd         sbin/ibcmd, its systemd units and sysusers.d file, ibcmd(8)
#
# The files are those of `make install PREFIX=/usr` (staged with DESTDIR, not
# listed twice): each goes to one package, the libraries to the multiarch
# directory, and a staged file no package takes fails the build. The control
# files come from packaging/deb/ through dpkg-dev's own tools, the ones
# debhelper runs underneath: dpkg-gensymbols (which fails when the library's
# exports differ from the symbols file in any way: -c4), dpkg-shlibdeps,
# dpkg-gencontrol, dpkg-deb. Not debhelper itself: dh would build through
# cargo with its own HOME (compat 13: rustup's toolchain not found), guess
# the build system, run `make check` as its test step and write the packages
# to the parent directory, each to be overridden; here every file and every
# step is written out. Needs dpkg-dev (scripts/install-deps.sh).
set -euo pipefail
umask 022

root=$(cd "$(dirname "$0")/.." && pwd)
out=$root/build/deb
pkgs=(libib-cm0 libib-cm-dev ibcmd)
cd "$root"

version=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)
deb_version=$(dpkg-parsechangelog -l packaging/deb/changelog -S Version)
if [ "${deb_version%-*}" != "$version" ]; then
  echo "deb: packaging/deb/changelog is at $deb_version, Cargo.toml at $version:" \
    "add a changelog entry (dch -v $version-1)" >&2
  exit 1
fi
multiarch=$(dpkg-architecture -qDEB_HOST_MULTIARCH)
libdir=usr/lib/$multiarch
export SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-$(dpkg-parsechangelog -l packaging/deb/changelog -S Timestamp)}

rm -rf "$out"
stage=$out/stage
mkdir -p "$out/debian"
echo "deb: make install DESTDIR=$stage PREFIX=/usr"
"${MAKE:-make}" --no-print-directory install DESTDIR="$stage" PREFIX=/usr MANDIR=/usr/share/man >"$out/install.log" 2>&1 || { cat "$out/install.log" >&2; exit 1; }

# The layout dpkg-dev's tools expect: debian/control, debian/changelog and a
# tree per package under debian/<package>.
cp packaging/deb/control packaging/deb/changelog "$out/debian/"
cd "$out"

# take PACKAGE TO-DIR FILE...: moves staged files (paths under the stage) into
# PACKAGE's tree, under TO-DIR.
take() {
  local pkg=$1 dir=$2 f
  shift 2
  mkdir -p "debian/$pkg/$dir"
  for f in "$@"; do
    [ -e "stage/$f" ] || [ -L "stage/$f" ] || { echo "deb: make install made no $f" >&2; exit 1; }
    mv "stage/$f" "debian/$pkg/$dir/"
  done
}
shopt -s nullglob
man3=(stage/usr/share/man/man3/*.3) man7=(stage/usr/share/man/man7/*.7) man8=(stage/usr/share/man/man8/*.8)
shopt -u nullglob
((${#man3[@]} && ${#man7[@]} && ${#man8[@]})) || { echo "deb: make install staged no man3, man7 or man8 page" >&2; exit 1; }

take libib-cm0 "$libdir" usr/lib/libib_cm.so.0 "usr/lib/libib_cm.so.$version"
take libib-cm-dev "$libdir" usr/lib/libib_cm.so usr/lib/libib_cm.a
take libib-cm-dev "$libdir/pkgconfig" usr/lib/pkgconfig/ib_cm.pc
take libib-cm-dev usr/include/rdma usr/include/rdma/ib_cm.h usr/include/rdma/ib_sa.h
take libib-cm-dev usr/share/man/man3 "${man3[@]#stage/}"
take libib-cm-dev usr/share/man/man7 "${man7[@]#stage/}"
take libib-cm-dev usr/share/ib_cm usr/share/ib_cm/libib_cm.supp
take ibcmd usr/sbin usr/sbin/ibcmd
take ibcmd usr/lib/systemd/system usr/lib/systemd/system/ibcmd.service usr/lib/systemd/system/ibcmd.socket
take ibcmd usr/lib/sysusers.d usr/lib/sysusers.d/ibcmd.conf
take ibcmd usr/share/man/man8 "${man8[@]#stage/}"
left=$(find stage ! -type d)
if [ -n "$left" ]; then
  echo "deb: make install staged files that no package takes (scripts/deb-build.sh):" >&2
  echo "$left" >&2
  exit 1
fi
rm -rf stage

# ib_cm.pc: the multiarch libdir, and no rpath (the library is in the
# linker's own path; Debian's policy forbids an rpath there).
pc=debian/libib-cm-dev/$libdir/pkgconfig/ib_cm.pc
# shellcheck disable=SC2016 # ${libdir}, ${prefix}: pkg-config's variables
sed -i -e "s|^libdir=\${prefix}/lib\$|libdir=\${prefix}/lib/$multiarch|" \
  -e 's|^Libs: -L${libdir} -Wl,-rpath,${libdir} -lib_cm$|Libs: -L${libdir} -lib_cm|' "$pc"
# shellcheck disable=SC2016
if ! grep -qx 'prefix=/usr' "$pc" || ! grep -qx "libdir=\${prefix}/lib/$multiarch" "$pc" ||
   ! grep -qx 'Libs: -L${libdir} -lib_cm' "$pc"; then
  echo "deb: pkgconfig/ib_cm.pc.in changed: adapt the libdir and Libs edits here" >&2
  exit 1
fi

# The release profile keeps line tables (Cargo.toml: debug = 1); a package
# ships stripped objects, as dh_strip does without a -dbgsym package.
strip --remove-section=.comment --remove-section=.note --strip-unneeded \
  "debian/libib-cm0/$libdir/libib_cm.so.$version"
chmod 0644 "debian/libib-cm0/$libdir/libib_cm.so.$version" # a library, not a program
strip --remove-section=.comment --remove-section=.note debian/ibcmd/usr/sbin/ibcmd
strip --strip-debug --remove-section=.comment --remove-section=.note \
  --enable-deterministic-archives "debian/libib-cm-dev/$libdir/libib_cm.a"

for pkg in "${pkgs[@]}"; do
  doc=debian/$pkg/usr/share/doc/$pkg
  mkdir -p "$doc" "debian/$pkg/DEBIAN"
  cp "$root/packaging/deb/copyright" "$doc/copyright"
  gzip -9nc "$root/packaging/deb/changelog" >"$doc/changelog.Debian.gz"
  if [ -d "debian/$pkg/usr/share/man" ]; then
    find "debian/$pkg/usr/share/man" -type f -name '*.[0-9]' -exec gzip -9n {} +
  fi
  for script in postinst prerm postrm triggers; do
    src=$root/packaging/deb/$pkg.$script
    [ -f "$src" ] || continue
    install -m "$([ "$script" = triggers ] && echo 0644 || echo 0755)" "$src" "debian/$pkg/DEBIAN/$script"
  done
done

# symbols: every symbol of libib_cm.map at the version of its node (a node
# IBCM_M.N is first released in M.N.0), as sym@NODE and the node's own
# definition NODE@NODE: `make lib` links libib_cm.so.0 with the map as its
# only version script (Makefile, SHARED). IBCM_DEB_SYMBOL_VERSIONS=0 writes
# sym@Base instead, for a library linked without it (cargo's cdylib).
symbol_versions=${IBCM_DEB_SYMBOL_VERSIONS:-1}
symbols_from_map() {
  echo "libib_cm.so.0 libib-cm0 #MINVER#"
  echo "* Build-Depends-Package: libib-cm-dev"
  sed -e 's|/\*.*\*/||' -e '/^\/\*/,/\*\//d' "$root/libib_cm.map" | awk -v versioned="$symbol_versions" '
    /^[A-Za-z0-9_.]+[ \t]*\{/ { node = $1; sub(/\{.*/, "", node); global = 0
      ver = node; sub(/^[A-Z]+_/, "", ver); ver = ver ".0"
      if (versioned) printf " %s@%s %s\n", node, node, ver
      next }
    /global:/ { global = 1; next }
    /local:/ { global = 0; next }
    global && /^[ \t]*[A-Za-z_][A-Za-z0-9_]*;/ { sym = $1; sub(/;.*/, "", sym)
      printf " %s@%s %s\n", sym, versioned ? node : "Base", ver }' | LC_ALL=C sort
}
symbols_from_map >debian/libib-cm0.symbols
[ "$(grep -c '^ [a-z].*@' debian/libib-cm0.symbols)" -gt 1 ] ||
  { echo "deb: no symbols read from libib_cm.map" >&2; exit 1; }
echo "libib_cm 0 libib-cm0 (>= $version)" >debian/libib-cm0/DEBIAN/shlibs
dpkg-gensymbols -c4 -plibib-cm0 -Pdebian/libib-cm0 -Idebian/libib-cm0.symbols \
  -Odebian/libib-cm0/DEBIAN/symbols -edebian/libib-cm0/"$libdir/libib_cm.so.$version" ||
  { echo "deb: libib_cm.so.0 exports differ from libib_cm.map (diff above)" >&2; exit 1; }

dpkg-shlibdeps -Tdebian/libib-cm0.substvars "debian/libib-cm0/$libdir/libib_cm.so.$version"
dpkg-shlibdeps -Tdebian/ibcmd.substvars debian/ibcmd/usr/sbin/ibcmd
: >debian/libib-cm-dev.substvars

for pkg in "${pkgs[@]}"; do
  (cd "debian/$pkg" && find . -type f ! -path './DEBIAN/*' -printf '%P\n' | LC_ALL=C sort |
    xargs -r -d '\n' md5sum >DEBIAN/md5sums)
  dpkg-gencontrol -p"$pkg" -P"debian/$pkg" -T"debian/$pkg.substvars" -fdebian/files
  dpkg-deb --root-owner-group -Zxz --build "debian/$pkg" . >/dev/null
done
rm -f debian/files
for deb in "$out"/*.deb; do echo "deb: $deb"; done
