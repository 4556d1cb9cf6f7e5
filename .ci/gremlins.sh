#!/usr/bin/env bash
# .ci/gremlins.sh — mutation testing of the pure packages with go-gremlins
# (pinned), reporting the test efficacy (killed / (killed + lived)) per
# package and failing below the goal (80%). The guarantee mutants of the
# relay are .ci/mutants.sh; this is the broad, tool-made kind.
#
# Packages: levels/, config/, offsetmap/ and cancel/set.go (pure code whose
# tests run in milliseconds, so each mutant costs one test build); an
# entry PKG:FILE.go mutates that file of the package only (cancel's reader
# and writer are Kafka I/O, covered by the relay's tests and mutants).
# wheel/ is left out: its crash, model and power-loss tests take seconds
# per run, times some 700 mutants.
#
# Env: GREMLINS_WORKERS (default 2), GREMLINS_THRESHOLD (default 80),
# GREMLINS_PKGS (default "levels config offsetmap cancel:set.go").
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
VERSION=v0.6.0
WORKERS="${GREMLINS_WORKERS:-2}"
THRESHOLD="${GREMLINS_THRESHOLD:-80}"
PKGS="${GREMLINS_PKGS:-levels config offsetmap cancel:set.go}"

# Its own GOBIN per version (a go-installed gremlins reports "dev" as its
# version, so the path is what pins it).
GBIN="${KDELAY_CACHE:-$HOME/.cache/kdelay}/gremlins-$VERSION"
BIN="$GBIN/gremlins"
if ! [[ -x "$BIN" ]]; then
  echo "GOBIN=$GBIN go install github.com/go-gremlins/gremlins/cmd/gremlins@$VERSION"
  GOBIN="$GBIN" go install "github.com/go-gremlins/gremlins/cmd/gremlins@$VERSION"
fi
echo "gremlins $VERSION: $BIN"

# go test vets each package it builds: one vet per mutant, a third of the
# step's time, and a mutant vet rejects would count as killed by a test.
export GOFLAGS="${GOFLAGS:+$GOFLAGS }-vet=off"

OUT="$(mktemp -d "${TMPDIR:-/tmp}/kdelay-gremlins.XXXXXX")"
trap 'rm -rf "$OUT"' EXIT
rc=0
summary=()
for entry in $PKGS; do
  p="${entry%%:*}"
  only="${entry#"$p"}" only="${only#:}"
  excl=()
  if [[ -n "$only" ]]; then
    [[ -f "$p/$only" ]] || { echo "gremlins: $p/$only does not exist (GREMLINS_PKGS entry $entry)"; exit 1; }
    for f in "$p"/*.go; do
      b="$(basename "$f")"
      [[ "$b" == *_test.go || "$b" == "$only" ]] && continue
      excl+=(-E "(^|/)${b//./\\.}\$")
    done
  fi
  echo
  echo "--- gremlins unleash ./$p${only:+ (only $only)} (workers $WORKERS; lived and timed-out mutants listed)"
  t0=$SECONDS
  set +e
  # --timeout-coefficient: a mutant's run may take 30x the unmutated one
  # (a loaded 2-core machine builds slowly; the default timed out mutants
  # that were not looping); one that loops is cut after some seconds.
  "$BIN" unleash --workers "$WORKERS" --timeout-coefficient 30 -S lt "${excl[@]}" \
    --threshold-efficacy "$THRESHOLD" "./$p" 2>&1 | tee "$OUT/$p.txt"
  st=${PIPESTATUS[0]}
  set -e
  eff="$(sed -n 's/^Test efficacy: //p' "$OUT/$p.txt" | tail -1)"
  kl="$(sed -n 's/^Killed: \([0-9]*\), Lived: \([0-9]*\).*/\1 killed, \2 lived/p' "$OUT/$p.txt" | tail -1)"
  line="$entry: efficacy ${eff:-?} ($kl) in $((SECONDS - t0))s"
  if ((st != 0)); then
    line="$line: FAILED (exit $st; goal ${THRESHOLD}%)"
    rc=1
  fi
  summary+=("$line")
done
echo
echo "gremlins $VERSION, efficacy per package (goal ${THRESHOLD}%):"
for s in "${summary[@]}"; do echo "  $s"; done
exit "$rc"
