#!/usr/bin/env bash
# How much the tests assert, counted the same way before and after a change
# that moves or renames tests (issue 39: nothing a test asserts may be lost).
#   rust tests       #[test] and #[tokio::test] functions in the tree
#   rust assertions  assert!, assert_eq!, assert_ne! (and debug_ forms)
#   c tests          the C suite's programs (c-tests/**/test_*.c, ibfabric_*.c)
#   c assertions     CHECK*, EXPECT*, assert( in c-tests/
# Usage: scripts/count-assertions.sh [DIR]   (default: the repository)
set -euo pipefail
cd "${1:-$(dirname "$0")/..}"
rs=$(git ls-files '*.rs')
cs=$(git ls-files 'c-tests/*.c' 'c-tests/*.h' 'c-tests/**/*.c')
count() { grep -Eoh "$1" $2 2>/dev/null | wc -l; }
echo "rust tests:      $(count '#\[(tokio::)?test(\(|\])' "$rs")"
echo "rust assertions: $(count '\b(debug_)?assert(_eq|_ne)?!' "$rs")"
echo "c tests:         $(git ls-files 'c-tests/test_*.c' 'c-tests/**/ibfabric_*.c' | wc -l)"
echo "c assertions:    $(count '\b[A-Z_]*(CHECK|EXPECT|ASSERT)[A-Z_]*\(|\bassert\(' "$cs")"
