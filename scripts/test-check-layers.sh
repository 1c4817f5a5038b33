#!/usr/bin/env bash
# test-check-layers.sh: scripts/check-layers.py refuses each way around it
# that is known (a hostile review tried them): in a scratch worktree of HEAD
# with this tree's check and docs, each case is written, the check must fail
# naming it, and the tree is reset. A control case must pass.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
SCRATCH=$(mktemp -d)
trap 'git -C "$ROOT" worktree remove --force "$SCRATCH/tree" >/dev/null 2>&1 || true; rm -rf "$SCRATCH"' EXIT
git -C "$ROOT" worktree add --detach "$SCRATCH/tree" HEAD >/dev/null 2>&1
cd "$SCRATCH/tree"
failed=0
reset() {
  git checkout -q -- . && git clean -qfd . >/dev/null
  # The check and the files it reads as they are in this tree, committed or not.
  for f in scripts/check-layers.py docs/architecture.md Cargo.toml src/lib.rs src/transport/mod.rs; do
    cp "$ROOT/$f" "$f"
  done
}
# case NAME EXPECTED-TEXT SHELL-SNIPPET
case_() {
  reset
  eval "$3"
  local out rc=0
  out=$(python3 scripts/check-layers.py 2>&1) || rc=$?
  if [ "$2" = pass ]; then
    [ $rc -eq 0 ] && echo "ok   $1" || { echo "FAIL $1: the control failed: $out"; failed=1; }
  elif [ $rc -ne 0 ] && grep -q -- "$2" <<<"$out"; then
    echo "ok   $1"
  else
    echo "FAIL $1: expected a problem with '$2', got rc $rc: $out"; failed=1
  fi
}
case_ "the tree as it is passes" pass 'true'
case_ "unsafe in a macro of a forbid crate" "the word unsafe" \
  'printf "macro_rules! m { (\$e:expr) => { unsafe { \$e } } }\n" >> crates/wire/src/lib.rs'
case_ "unsafe in a doctest" "the word unsafe" \
  'printf "/// \`\`\`\n/// let x = unsafe { 1 };\n/// \`\`\`\npub fn doc() {}\n" >> crates/wire/src/lib.rs'
case_ "an exempt module's child moved out by #[path]" "#\[path\] to a file outside" \
  'printf "#[path = \"../cm/raw.rs\"]\nmod raw;\n" >> src/os/mod.rs; echo "fn f() {}" > src/cm/raw.rs'
case_ "an upward import by #[path]" "#\[path\] to a file outside" \
  'printf "#[path = \"../../../src/cm/counters.rs\"]\npub mod rc;\n" >> crates/wire/src/lib.rs'
case_ "include!" "include! brings in" 'echo "include!(\"payload.inc\");" >> src/cm/mod.rs'
case_ "an allow behind another attribute" "an exemption from unsafe_code" \
  'printf "#[doc = \"https://x\"] #[allow(unsafe_code)]\npub fn d() {}\n" >> src/cm/mod.rs'
case_ "an item between an allow and its mod" "an exemption from unsafe_code" \
  'sed -i "s|^pub mod ffi;|#[rustfmt::skip] #[unsafe(no_mangle)] pub extern \"C\" fn sneak() {}\n#[allow(unsafe_code)]\npub mod ffi;|" src/lib.rs'
case_ "an allow for a module not listed" "which is not listed" \
  'sed -i "s|^pub mod cm;|#[allow(unsafe_code)]\npub mod cm;|" src/lib.rs'
case_ "cfg_attr and expect" "an exemption from unsafe_code" \
  'printf "#[cfg_attr(all(), expect(unsafe_code))]\nfn e() {}\n" >> src/cm/mod.rs'
case_ "cargo flags" "sets rustc flags" \
  'mkdir -p .cargo; printf "[build]\nrustflags = [\"-Aunsafe-code\"]\n" > .cargo/config.toml'
case_ "a forbid in a block comment" "has no #!\[forbid(unsafe_code)\]" \
  'sed -i "s|^#!\[forbid(unsafe_code)\]|/*\n#![forbid(unsafe_code)]\n*/|" crates/engine/src/lib.rs'
case_ "a crate edge the picture does not draw" "does not draw" \
  'printf "\n[dev-dependencies]\nib_cm = { path = \"../..\" }\n" >> crates/engine/Cargo.toml'
case_ "an upward edge that makes a cycle" "cargo metadata failed" \
  'sed -i "s|^\[dependencies\]|[dependencies]\nib-cm-engine = { path = \"../engine\" }|" crates/wire/Cargo.toml'
case_ "a listed place with no exemption" "nothing allows it" \
  'sed -i "s|^examples/rc_pingpong.rs|examples/rc_pingpong.rs\nsrc/cm/|" docs/architecture.md'
exit $failed
