#!/usr/bin/env bash
# .ci/staticcheck.sh — staticcheck over every Go module of the repository
# (each go.mod git knows of), from anywhere; make lint runs it too. Installs
# the pinned staticcheck with go install when it is missing or at another
# version. The build tags cluster and example are set, so that the cluster
# tier's and the examples' files are checked too (and what only they use is
# not reported unused).
set -euo pipefail

STATICCHECK_VERSION=0.8.2 # supports Go 1.26
STATICCHECK_MODULE=honnef.co/go/tools/cmd/staticcheck@v$STATICCHECK_VERSION

cd "$(dirname "${BASH_SOURCE[0]}")/.."

gobin="$(go env GOBIN)"
if [ -z "$gobin" ]; then
  gobin="$(go env GOPATH | cut -d: -f1)/bin"
fi
sc="$gobin/staticcheck"
have="$("$sc" -version 2>/dev/null || true)"
if [[ "$have" != *"($STATICCHECK_VERSION)" ]]; then
  echo "== go install $STATICCHECK_MODULE"
  go install "$STATICCHECK_MODULE"
fi
echo "== $("$sc" -version)"

n=0
while read -r mod; do
  dir="$(dirname "$mod")"
  echo "== $dir: staticcheck -tags cluster,example ./..."
  (cd "$dir" && "$sc" -tags cluster,example ./...)
  n=$((n + 1))
done < <(git ls-files '*go.mod' 'go.mod')
[ "$n" -gt 0 ] || { echo "staticcheck: no go.mod found" >&2; exit 1; }
echo "== staticcheck: no findings in $n modules"
