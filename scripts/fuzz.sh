#!/usr/bin/env bash
# Runs every fuzz target of the module, one after the other, each for
# FUZZTIME (default 30s): go test runs one fuzz target at a time. The
# targets are found, not listed, so that a new one is fuzzed too. A
# failure stops the run; the failing input is kept under the package's
# testdata/fuzz/ for go test to replay.
#
#   ./scripts/fuzz.sh                 # every target, 30 s each
#   FUZZTIME=5m ./scripts/fuzz.sh     # longer
#   ./scripts/fuzz.sh FuzzDecode      # the targets whose name matches
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PATH:/usr/local/go/bin"
FUZZTIME=${FUZZTIME:-30s}
match=${1:-.}
n=0
while IFS=: read -r file name; do
	pkg=./$(dirname "$file")
	echo "== $pkg $name ($FUZZTIME)"
	go test "$pkg" -run '^$' -fuzz "^${name}\$" -fuzztime "$FUZZTIME"
	n=$((n + 1))
done < <(grep -rHo --include='*_test.go' --exclude-dir=.git --exclude-dir=deploy '^func Fuzz[A-Za-z0-9_]*' . |
	sed 's|^\./||; s|:func |:|' | grep -E ":.*${match}" | sort)
if [ "$n" -eq 0 ]; then
	echo "fuzz.sh: no fuzz target matches $match" >&2
	exit 1
fi
echo "fuzz.sh: $n targets fuzzed for $FUZZTIME each"
