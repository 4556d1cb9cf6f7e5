#!/usr/bin/env bash
# .ci/compat.sh — the real-broker smoke tests on an older Apache Kafka
# release (default 3.9.1), run from .ci/run or by hand from the repo root:
#
#   bash .ci/compat.sh
#
# Starts its own broker of that release (.ci/kafka.sh with
# KDELAY_KAFKA_VERSION, a private state dir, stopped on exit whatever
# happens) and runs, with -race, the integration tests that cover the
# basics a Kafka release must support: delivery on the default levels
# (TestDefaultLevels), cancel on every path and through a kill -9 of the
# relay (TestCancelPaths, TestCancelKill/with_data_dir) and exactly-once
# through a kill -9 (TestKill9Restart/exactly-once). It fails unless the
# broker reports the requested version and every one of those tests ran
# and passed (a skip or a pattern matching nothing fails the run).
#
# Environment: KDELAY_COMPAT_KAFKA_VERSION (default 3.9.1), and those of
# .ci/kafka.sh (KDELAY_CACHE, JAVA_HOME, ...).
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
ROOT="$PWD"
KAFKA_SH="$ROOT/.ci/kafka.sh"
VERSION="${KDELAY_COMPAT_KAFKA_VERSION:-3.9.1}"
WORK="$(mktemp -d "${TMPDIR:-/tmp}/kdelay-compat.XXXXXX")"
export KDELAY_KAFKA_STATE="$WORK/kafka" KDELAY_KAFKA_VERSION="$VERSION"
unset KDELAY_KAFKA_PORT

# The smoke set: top-level tests, then the subtests to keep (tests without
# subtests ignore the second part).
RUN='^(TestDefaultLevels|TestCancelPaths|TestCancelKill|TestKill9Restart)$/^(exactly-once|with_data_dir)$'
WANT=(TestDefaultLevels TestCancelPaths TestCancelKill/with_data_dir TestKill9Restart/exactly-once)

log() { printf '[compat.sh] %s\n' "$*"; }

BROKER_UP=0
cleanup() {
  local rc=$?
  set +e
  if ((BROKER_UP)); then
    ((rc != 0)) && bash "$KAFKA_SH" logs 80
    bash "$KAFKA_SH" stop
  fi
  if ((rc == 0)); then rm -rf "$WORK"; else log "FAILED (exit $rc); work dir kept: $WORK"; fi
  exit "$rc"
}
trap cleanup EXIT

t0=$SECONDS
BROKER_UP=1
addr="$(bash "$KAFKA_SH" start)"
status="$(bash "$KAFKA_SH" status)"
echo "$status"
[[ "$status" == *"Apache Kafka $VERSION,"* ]] || { log "the broker is not Apache Kafka $VERSION"; exit 1; }
log "broker $addr up in $((SECONDS - t0))s"

t1=$SECONDS
out="$WORK/test.log"
set +e
KDELAY_TEST_BROKERS="$addr" KDELAY_KAFKA_CTL="$KAFKA_SH" \
  go test -race -count=1 -v -timeout 10m -run "$RUN" ./integration/ 2>&1 | tee "$out" \
  | grep --line-buffered -v '^        {' # relay JSON log lines of a failure stay in $out
rc=${PIPESTATUS[0]}
set -e
((rc == 0)) || { log "go test failed (exit $rc)"; exit "$rc"; }
if grep -q -- '--- SKIP' "$out"; then
  grep -- '--- SKIP' "$out"
  log "a smoke test skipped"
  exit 1
fi
missing=""
for t in "${WANT[@]}"; do
  grep -Eq -- "--- PASS: ${t}( |$)" "$out" || missing+=" $t"
done
[[ -z "$missing" ]] || { log "did not run and pass:$missing"; exit 1; }
log "Apache Kafka $VERSION: ${WANT[*]} passed; tests $((SECONDS - t1))s, total $((SECONDS - t0))s"
