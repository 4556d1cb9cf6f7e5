#!/usr/bin/env bash
# Checks the kdelay Helm chart:
#   1. installs helm (go install, the only allowed way) when it is missing,
#   2. helm lint with the default values and with ci/all-on-values.yaml,
#   3. helm template with both value sets (for Kubernetes $KUBE_VERSION:
#      helm template assumes v1.20 otherwise, older than the chart's
#      kubeVersion), and helm package,
#   4. the Go checks of charts/chartcheck (decode the manifests into
#      Kubernetes objects and verify their key fields, NOTES, README values
#      table, Dockerfile build line).
# Usage: bash charts/check.sh   (from anywhere)
set -euo pipefail

HELM_MODULE=helm.sh/helm/v3/cmd/helm@v3.22.0
KUBE_VERSION=1.32.0

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
chart="$here/kdelay"
allon="$chart/ci/all-on-values.yaml"

gobin="$(go env GOBIN)"
if [ -z "$gobin" ]; then
  gobin="$(go env GOPATH | cut -d: -f1)/bin"
fi
export PATH="$PATH:$gobin"

if ! command -v helm >/dev/null 2>&1; then
  echo "== helm not found; go install $HELM_MODULE"
  start=$SECONDS
  go install "$HELM_MODULE"
  echo "== helm installed in $((SECONDS - start))s"
fi
echo "== $(command -v helm): $(helm version --short 2>/dev/null || helm version)"

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

for set in default all-on; do
  args=()
  if [ "$set" = all-on ]; then args=(-f "$allon"); fi
  echo "== helm lint ($set values)"
  helm lint --strict "$chart" "${args[@]}"
  echo "== helm template ($set values)"
  helm template kdelay "$chart" --namespace kdelay --kube-version "$KUBE_VERSION" "${args[@]}" >"$tmp/$set.yaml"
  echo "   rendered: $(grep '^kind: ' "$tmp/$set.yaml" | sort | uniq -c | awk '{printf "%s%s x%s", sep, $3, $1; sep=", "}')"
done

echo "== helm package"
helm package "$chart" --destination "$tmp" | sed 's/^/   /'

echo "== go test (charts/chartcheck)"
cd "$here/chartcheck"
go test -count=1 ./...
