#!/usr/bin/env bash
# The project's test command.
#
#   scripts/test.sh                        go vet ./..., go test -race -count=1 ./...,
#                                          the store's and engine's allocation bounds without -race,
#                                          then every fuzz target for 10,000 runs (scripts/fuzz.sh)
#                                          and the web UI asset check (scripts/ui.sh check)
#   scripts/test.sh -run Foo               same, only tests matching Foo
#   scripts/test.sh -run Foo ./kairosstore/...   only these packages (vet too)
#
# It builds the pinned Prometheus server once (scripts/prometheus.sh), starts a
# private Cassandra test node (scripts/cassandra.sh) and stops it on any exit
# (success, failure, Ctrl-C), exports KAIROS_TEST_CASSANDRA and
# KAIROS_TEST_PROMETHEUS for the tests, installs Debian's chromium and npm for
# the web UI's tests when missing (as root or under CI=true), and exits with go
# test's status.
#
# If KAIROS_TEST_CASSANDRA is already set (a node you started yourself with
# `export "$(scripts/cassandra.sh start)"`), that node is used instead.
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$REPO"

log() { printf 'test.sh: %s\n' "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

command -v go >/dev/null || die "go is not installed"
[[ $(go env CGO_ENABLED) == 1 ]] || die "go test -race needs cgo: install a C compiler (Debian: apt-get install gcc) and do not set CGO_ENABLED=0"

# Packages: the non-flag arguments that look like package patterns; ./... if none.
# Everything after -args belongs to the test binaries.
pkgs=()
for a in "$@"; do
	[[ $a == -args || $a == --args ]] && break
	case $a in
	./* | ../* | /* | . | .. | all | std | github.com/kairos-remote/kairos-adapter*) pkgs+=("$a") ;;
	esac
done
extra=()
((${#pkgs[@]} == 0)) && extra=(./...)

CASSANDRA_RUN_DIR=''
# shellcheck disable=SC2317 # invoked by the traps
cleanup() {
	local st=$?
	trap - EXIT INT TERM
	if [[ -n $CASSANDRA_RUN_DIR ]]; then
		KAIROS_RUN_DIR=$CASSANDRA_RUN_DIR "$REPO/scripts/cassandra.sh" stop || true
		rm -rf "$CASSANDRA_RUN_DIR"
	fi
	exit "$st"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# Prometheus first (slow only the first time; cached afterwards), so that no
# node idles while it builds.
KAIROS_TEST_PROMETHEUS=$("$REPO/scripts/prometheus.sh")
[[ -x $KAIROS_TEST_PROMETHEUS ]] || die "scripts/prometheus.sh gave no binary: '$KAIROS_TEST_PROMETHEUS'"
export KAIROS_TEST_PROMETHEUS

if [[ -n ${KAIROS_TEST_CASSANDRA:-} ]]; then
	host=${KAIROS_TEST_CASSANDRA%:*} port=${KAIROS_TEST_CASSANDRA##*:}
	(exec 3<>"/dev/tcp/$host/$port") 2>/dev/null ||
		die "KAIROS_TEST_CASSANDRA=$KAIROS_TEST_CASSANDRA is set but nothing listens there (unset it to let test.sh start a node)"
	log "using the Cassandra node at KAIROS_TEST_CASSANDRA=$KAIROS_TEST_CASSANDRA"
else
	# A private run dir: parallel test.sh invocations each get their own node.
	mkdir -p "$REPO/.cache"
	CASSANDRA_RUN_DIR=$(mktemp -d "$REPO/.cache/test-cassandra.XXXXXX")
	line=$(KAIROS_RUN_DIR=$CASSANDRA_RUN_DIR "$REPO/scripts/cassandra.sh" start)
	[[ $line == KAIROS_TEST_CASSANDRA=* ]] || die "unexpected output from cassandra.sh start: $line"
	export KAIROS_TEST_CASSANDRA=${line#KAIROS_TEST_CASSANDRA=}
fi

log "KAIROS_TEST_CASSANDRA=$KAIROS_TEST_CASSANDRA KAIROS_TEST_PROMETHEUS=$KAIROS_TEST_PROMETHEUS"

# The web UI's browser test (e2e TestWebUI) needs Debian's chromium, and the
# asset check (scripts/ui.sh check, below) npm. They are installed only where
# that is ours to do: as root or under CI=true (a fresh CI machine);
# elsewhere the browser test skips with a message (it fails under CI) and
# the asset check is left out.
ci=$(echo "${CI:-}" | tr '[:upper:]' '[:lower:]')
missing=()
command -v chromium >/dev/null || [[ -n ${KAIROS_TEST_CHROMIUM:-} ]] || missing+=(chromium)
command -v npm >/dev/null || missing+=(npm)
if ((${#missing[@]} > 0)) && { ((EUID == 0)) || [[ $ci == true || $ci == 1 ]]; }; then
	log "installing ${missing[*]} for the web UI's tests"
	sudo=()
	((EUID == 0)) || sudo=(sudo)
	if ! { "${sudo[@]}" apt-get update -qq && "${sudo[@]}" apt-get install -y -qq "${missing[@]}" >/dev/null; }; then
		[[ $ci == true || $ci == 1 ]] && die "cannot install ${missing[*]} (apt-get install ${missing[*]})"
		log "cannot install ${missing[*]}: the web UI's tests that need them skip"
	fi
fi

vet=("${pkgs[@]}")
((${#vet[@]} == 0)) && vet=(./...)
# -stdmethods=false: without it vet's only report is Prometheus's own
# iterator shape: chunkenc.Iterator has Seek(int64) ValueType, which vet
# mistakes for a malformed io.Seeker, and every series iterator must have
# that method. Run plain `go vet ./...` now and then to see that nothing else
# hides behind the flag.
log "go vet -stdmethods=false ${vet[*]}"
go vet -stdmethods=false "${vet[@]}"

# -timeout: a package's tests together may pass go test's default 10
# minutes on two busy cores (queryapi's rollup table runs on both engines).
log "go test -race -count=1 -timeout=30m ${extra[*]} $*"
st=0
go test -race -count=1 -timeout=30m "${extra[@]}" "$@" || st=$?
# The store's and the engine's allocation bounds skip under the race detector, which
# allocates on its own: on a full run they run again without it, so that
# CI checks them rather than skipping them.
if ((st == 0 && $# == 0)); then
	log "go test -count=1 -run 'Allocs|BytesPerCell' ./kairosstore/ ./kairosstore/pebblekv/ (no race detector)"
	go test -count=1 -run 'Allocs|BytesPerCell' -v ./kairosstore/ ./kairosstore/pebblekv/ | grep -E '^(--- |ok|FAIL|PASS)' || st=$?
fi
# Every fuzz target briefly, on a full run only (not when tests or packages
# were picked): CI runs them each time.
if ((st == 0 && $# == 0)); then
	"$REPO/scripts/fuzz.sh" || st=$?
fi
# The committed web UI assets must be what their pinned sources build: on a
# full run under CI (which needs npm), or wherever npm is installed.
if ((st == 0 && $# == 0)) && { [[ $ci == true || $ci == 1 ]] || command -v npm >/dev/null; }; then
	"$REPO/scripts/ui.sh" check || st=$?
fi
exit "$st"
