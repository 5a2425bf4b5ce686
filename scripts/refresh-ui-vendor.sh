#!/usr/bin/env bash
# Fetches the dashboard's charting library, uPlot, from the npm registry into
# api/ui/vendor (the built files, its licence), and notes the version in
# api/ui/vendor/README.md. Usage: scripts/refresh-ui-vendor.sh [VERSION]
# (default: the latest). Needs npm; nothing else is installed.
set -euo pipefail
cd "$(dirname "$0")/.."
version="${1:-$(npm view uplot version)}"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
(cd "$tmp" && npm pack --silent "uplot@$version" >/dev/null && tar xzf "uplot-$version.tgz")
dst=api/ui/vendor
cp "$tmp/package/dist/uPlot.iife.min.js" "$tmp/package/dist/uPlot.min.css" "$dst/"
cp "$tmp/package/LICENSE" "$dst/uPlot.LICENSE"
sed -i -E "s/\| [0-9]+\.[0-9]+\.[0-9]+ \| MIT/| $version | MIT/" "$dst/README.md"
echo "uPlot $version in $dst"
