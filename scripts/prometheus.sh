#!/usr/bin/env bash
# Builds the real Prometheus server that the e2e tests run (from the pinned
# tools/prometheus module) into the cache, once, and prints its path.
#
# Environment: KAIROS_CACHE (default ${XDG_CACHE_HOME:-$HOME/.cache}/kairosadapter)
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
TOOLS=$REPO/tools/prometheus
# The version pinned in tools/prometheus/go.mod names the cache dir, so a bump rebuilds.
VERSION=$(sed -n 's#^[[:space:]]*\(require[[:space:]]\{1,\}\)\{0,1\}github.com/prometheus/prometheus[[:space:]]\{1,\}\(v[^[:space:]]*\).*#\2#p' "$TOOLS/go.mod" | head -n1)
[[ -n $VERSION ]] || { echo "prometheus.sh: ERROR: no github.com/prometheus/prometheus version in $TOOLS/go.mod" >&2; exit 1; }
CACHE=${KAIROS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/kairosadapter}
OUT=$CACHE/prometheus-$VERSION/prometheus

if [[ ! -x $OUT ]]; then
	command -v go >/dev/null || { echo "prometheus.sh: ERROR: go is not installed" >&2; exit 1; }
	mkdir -p "$(dirname "$OUT")"
	echo "prometheus.sh: building Prometheus $VERSION into $OUT (takes a few minutes the first time) ..." >&2
	tmp=$OUT.tmp.$$
	trap 'rm -f "$tmp"' EXIT
	(cd "$TOOLS" && GOWORK=off go build -o "$tmp" github.com/prometheus/prometheus/cmd/prometheus)
	mv -f "$tmp" "$OUT"
	trap - EXIT
fi
printf '%s\n' "$OUT"
