#!/usr/bin/env bash
# .ci/release.sh — the release build as CI runs it (bash .ci/release.sh from
# anywhere):
#   1. installs goreleaser and helm with go install (pinned) when missing or
#      at another version,
#   2. goreleaser check (.goreleaser.yaml),
#   3. goreleaser release --snapshot --clean --skip=publish: the binaries for
#      linux and darwin, amd64 and arm64, their archives, the packaged chart
#      and checksums.txt, into dist/ (and the chart into build/charts/),
#   4. checks what it built: four archives, every checksum, the host's binary
#      reports the snapshot version and the commit, the packaged chart
#      carries that version and renders with it as the image tag.
# See docs/dev/release.md.
set -euo pipefail

GORELEASER_VERSION=v2.17.0
GORELEASER_MODULE=github.com/goreleaser/goreleaser/v2@$GORELEASER_VERSION
HELM_MODULE=helm.sh/helm/v3/cmd/helm@v3.22.0
KUBE_VERSION=1.32.0

cd "$(dirname "${BASH_SOURCE[0]}")/.."

gobin="$(go env GOBIN)"
if [ -z "$gobin" ]; then
  gobin="$(go env GOPATH | cut -d: -f1)/bin"
fi
# First on PATH: goreleaser's before hook runs the helm found there.
export PATH="$gobin:$PATH"

have="$("$gobin/goreleaser" --version 2>/dev/null || true)"
if ! grep -Eq "^GitVersion: +$GORELEASER_VERSION\$" <<<"$have"; then
  echo "== go install $GORELEASER_MODULE"
  start=$SECONDS
  go install "$GORELEASER_MODULE"
  echo "== goreleaser installed in $((SECONDS - start))s"
fi
if ! command -v helm >/dev/null 2>&1; then
  echo "== go install $HELM_MODULE"
  go install "$HELM_MODULE"
fi
echo "== $("$gobin/goreleaser" --version 2>&1 | grep -E '^(GitVersion|GoVersion):' | tr -s ' ' | paste -sd ' ')"

echo "== goreleaser check"
"$gobin/goreleaser" check

echo "== goreleaser release --snapshot --clean --skip=publish"
start=$SECONDS
"$gobin/goreleaser" release --snapshot --clean --skip=publish
echo "== snapshot built in $((SECONDS - start))s"

echo "== checking dist/"
fail() { echo "release check: $*" >&2; exit 1; }
version="$(sed -n 's/.*"version":"\([^"]*\)".*/\1/p' dist/metadata.json)"
[ -n "$version" ] || fail "no version in dist/metadata.json"
for target in linux_amd64 linux_arm64 darwin_amd64 darwin_arm64; do
  archive="dist/kdelay_${version}_${target}.tar.gz"
  [ -f "$archive" ] || fail "missing $archive"
  list="$(tar -tzf "$archive")"
  for f in kdelay LICENSE README.md CHANGELOG.md; do
    grep -qx "$f" <<<"$list" || fail "$archive lacks $f"
  done
done
n="$(find dist -maxdepth 1 -name 'kdelay_*.tar.gz' | wc -l)"
[ "$n" -eq 4 ] || fail "$n archives in dist/, want 4"
chart="build/charts/kdelay-$version.tgz"
[ -f "$chart" ] || fail "missing $chart"
grep -q " kdelay-$version.tgz\$" dist/checksums.txt || fail "checksums.txt lacks the chart"
[ "$(wc -l <dist/checksums.txt)" -eq 5 ] || fail "checksums.txt has $(wc -l <dist/checksums.txt) lines, want 5"
(cd dist && grep -v " kdelay-$version.tgz\$" checksums.txt | sha256sum --quiet -c -)
(cd build/charts && grep " kdelay-$version.tgz\$" ../../dist/checksums.txt | sha256sum --quiet -c -)

host="$(go env GOOS)_$(go env GOARCH)"
bin="$(find dist -path "dist/kdelay_${host}*/kdelay" -type f | head -1)"
[ -x "$bin" ] || fail "no binary for $host in dist/"
out="$("$bin" version)"
echo "$out" | sed 's/^/   /'
[ "$(echo "$out" | sed -n 1p)" = "kdelay v$version" ] || fail "$bin version does not print v$version"
grep -q "^commit $(git rev-parse HEAD)" <<<"$out" || fail "$bin version does not print the commit $(git rev-parse HEAD)"

meta="$(helm show chart "$chart")"
grep -qx "version: $version" <<<"$meta" || fail "$chart: version is not $version"
grep -qx "appVersion: $version" <<<"$meta" || fail "$chart: appVersion is not $version"
rendered="$(helm template kdelay "$chart" --kube-version "$KUBE_VERSION")"
grep -q "image: \"ghcr.io/kdelay/kdelay:$version\"" <<<"$rendered" \
  || fail "$chart does not default to the image ghcr.io/kdelay/kdelay:$version"
echo "== release snapshot $version: 4 archives, chart, checksums ok"
