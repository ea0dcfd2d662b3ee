#!/usr/bin/env bash
# Runs every Go fuzz target of the repository briefly, one at a time (go test
# allows only one -fuzz target per run). scripts/test.sh calls it after the
# tests; a failure leaves the crashing input under the package's
# testdata/fuzz/ and fails the run.
#
#   scripts/fuzz.sh            each target for ${KAIROS_FUZZTIME:-10000x}
#   KAIROS_FUZZTIME=200000x scripts/fuzz.sh
#
# The budget is a count of executions, not a duration: with a duration, Go's
# fuzz coordinator before Go 1.27 can report its own deadline as a failure
# ("context deadline exceeded", no failing input) on a loaded machine
# (golang/go#75804). A count has no deadline to race; a slow machine just takes
# longer.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
fuzztime=${KAIROS_FUZZTIME:-10000x}
targets=0
while IFS= read -r file; do
	pkg=./$(dirname "$file")
	while IFS= read -r name; do
		echo "fuzz.sh: $pkg $name for $fuzztime" >&2
		if ! out=$(go test -run '^$' -fuzz "^${name}\$" -fuzztime "$fuzztime" "$pkg" 2>&1); then
			printf '%s\n' "$out"
			echo "fuzz.sh: $pkg $name FAILED" >&2
			exit 1
		fi
		targets=$((targets + 1))
	done < <(sed -n 's/^func \(Fuzz[A-Za-z0-9_]*\)(.*/\1/p' "$file")
done < <(git ls-files '*_test.go' | xargs grep -l '^func Fuzz' | sort)
((targets > 0)) || { echo "fuzz.sh: no fuzz targets found" >&2; exit 1; }
echo "fuzz.sh: $targets fuzz targets ran for $fuzztime each without a failure" >&2
