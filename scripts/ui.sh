#!/usr/bin/env bash
# Builds the web UI's assets (web/ui/static/app.js, app.css) from the pinned
# sources in web/ui (package.json, package-lock.json, src/).
#
#   scripts/ui.sh build   npm ci, type-check (tsc), bundle into web/ui/static
#   scripts/ui.sh check   npm ci, type-check, bundle into a temporary directory
#                         and require the committed assets to be byte for byte
#                         what the sources build (esbuild's output depends only
#                         on its version, its flags and the input files, all
#                         pinned here)
#   scripts/ui.sh screenshots
#                         run TestWebUI (headless Chromium) and save the three
#                         pages as docs/ui-query.png, ui-explorer.png,
#                         ui-status.png
#
# Needs Node.js and npm (the registry, or a warm npm cache). `go run .` and
# `go build` need neither: the built assets are committed and embedded.
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
UI=$REPO/web/ui
cd "$UI"

die() { printf 'ui.sh: ERROR: %s\n' "$*" >&2; exit 1; }
command -v npm >/dev/null || die "npm is not installed (Debian: apt-get install nodejs npm)"

bundle() {
	local out=$1
	npx --no-install tsc -p .
	# --legal-comments=none and no source map keep the output a function of
	# the sources and esbuild's version alone.
	npx --no-install esbuild src/main.ts --bundle --minify --format=iife --target=es2020 \
		--legal-comments=none --log-level=warning --outfile="$out/app.js"
	npx --no-install esbuild src/app.css --bundle --minify --log-level=warning --outfile="$out/app.css"
}

case ${1:-} in
build)
	npm ci --no-audit --no-fund --loglevel=error
	bundle "$UI/static"
	for f in app.js app.css; do
		printf '%s: %s bytes, %s gzipped\n' "$f" "$(wc -c <"static/$f")" "$(gzip -9c "static/$f" | wc -c)"
	done
	;;
check)
	npm ci --no-audit --no-fund --loglevel=error
	tmp=$(mktemp -d)
	trap 'rm -rf "$tmp"' EXIT
	bundle "$tmp"
	for f in app.js app.css; do
		cmp -s "$tmp/$f" "static/$f" || die "web/ui/static/$f is not what web/ui/src builds: run scripts/ui.sh build and commit it"
	done
	echo "ui.sh: web/ui/static matches its sources"
	;;
screenshots)
	cd "$REPO"
	KAIROS_UI_SCREENSHOTS=$REPO/docs go test -count=1 -run '^TestWebUI$' ./e2e/
	ls -l docs/ui-*.png
	;;
*)
	sed -n '2,19p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2
	exit 2
	;;
esac
