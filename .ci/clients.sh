#!/usr/bin/env bash
# .ci/clients.sh — the producer helpers' suites (clients/java, clients/python),
# run from .ci/run (tier 3) or by hand from the repo root:
#
#   bash .ci/clients.sh
#
# Starts its own Apache Kafka broker (.ci/kafka.sh, private state dir, stopped
# on exit whatever happens), builds the relay binary, then runs `mvn -B test`
# and `pytest`, both including their integration tests against the broker and
# a relay each test starts from that binary (`mvn test` runs the Spring Kafka
# test twice: with Jackson on the classpath and without). Every step is timed. The
# integration tests must run, not skip: CI=true is exported (a skip fails
# there) and the JUnit reports are checked for zero skips.
#
# Needs Go, Java 17+, Maven; installs Python (Debian python3, python3-venv) if
# missing, and pytest + confluent-kafka (PyPI) into a cached virtualenv under
# ${KDELAY_CACHE:-$HOME/.cache/kdelay}/py-venv.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
ROOT="$PWD"
KAFKA_SH="$ROOT/.ci/kafka.sh"
CACHE_ROOT="${KDELAY_CACHE:-${HOME:-/root}/.cache/kdelay}"
VENV="$CACHE_ROOT/py-venv"
WORK="$(mktemp -d "${TMPDIR:-/tmp}/kdelay-clients.XXXXXX")"
export KDELAY_KAFKA_STATE="$WORK/kafka"
export CI=true

log() { printf '[clients.sh] %s\n' "$*"; }
TIMES=()
step() { # step NAME CMD...: run and time one step
  local name="$1" t0=$SECONDS
  shift
  log ">>> $name"
  "$@"
  TIMES+=("$((SECONDS - t0))s  $name")
  log "<<< $name: $((SECONDS - t0))s"
}

BROKER_UP=0
cleanup() {
  local rc=$?
  set +e
  if ((BROKER_UP)); then
    ((rc != 0)) && bash "$KAFKA_SH" logs 80
    bash "$KAFKA_SH" stop
  fi
  ((rc == 0)) && rm -rf "$WORK"
  ((rc != 0)) && log "FAILED (exit $rc); work dir kept: $WORK"
  if ((${#TIMES[@]})); then
    log "step times:"
    printf '  %s\n' "${TIMES[@]}"
  fi
  exit "$rc"
}
trap cleanup EXIT

python_env() {
  if ! command -v python3 >/dev/null; then
    log "python3 missing: installing the Debian packages python3, python3-venv"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3 python3-venv >/dev/null
  fi
  if [[ ! -x "$VENV/bin/python" ]]; then
    mkdir -p "$CACHE_ROOT"
    if ! python3 -m venv "$VENV" 2>"$WORK/venv.err"; then
      log "python3 -m venv failed ($(head -c 200 "$WORK/venv.err")); installing python3-venv"
      rm -rf "$VENV"
      apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv >/dev/null
      python3 -m venv "$VENV"
    fi
  fi
  if ! "$VENV/bin/python" -c 'import pytest, confluent_kafka' 2>/dev/null; then
    "$VENV/bin/python" -m pip install -q --disable-pip-version-check pytest confluent-kafka
  fi
  "$VENV/bin/python" -c 'import sys, pytest, confluent_kafka; print("python", sys.version.split()[0], "pytest", pytest.__version__, "confluent-kafka", confluent_kafka.version()[0], "librdkafka", confluent_kafka.libversion()[0])'
}

start_broker() {
  BROKER_UP=1
  KDELAY_TEST_BROKERS="$(bash "$KAFKA_SH" start)"
  export KDELAY_TEST_BROKERS
  log "broker $KDELAY_TEST_BROKERS"
}

build_relay() {
  export KDELAY_BIN="$WORK/kdelay"
  go build -o "$KDELAY_BIN" ./cmd/kdelay
}

# no_skips REPORT...: every JUnit XML report ran tests and skipped none.
no_skips() {
  local f total=0
  for f in "$@"; do
    [[ -f "$f" ]] || { log "missing test report $f"; return 1; }
    if grep -Eq '<testsuite[^>]* skipped="[1-9]' "$f"; then
      log "$f: tests were skipped"; grep -o '<skipped[^>]*>' "$f" | head; return 1
    fi
    total=$((total + $(grep -o '<testcase' "$f" | wc -l)))
  done
  ((total > 0)) || { log "no test cases in $*"; return 1; }
  log "$total test cases, none skipped"
}

java_tests() {
  (cd clients/java && mvn -B -ntp test)
  no_skips clients/java/target/surefire-reports/TEST-*.xml
  no_skips clients/java/target/surefire-reports-without-jackson/TEST-*.xml
}

python_tests() {
  (cd clients/python && "$VENV/bin/python" -m pytest -p no:cacheprovider -rs -q -s --junitxml="$WORK/pytest.xml")
  no_skips "$WORK/pytest.xml"
}

step "python: venv with pytest and confluent-kafka" python_env
step "kafka: start (own state dir)" start_broker
step "go build ./cmd/kdelay (the relay the integration tests run)" build_relay
step "java: mvn -B test (clients/java, with the integration and Spring Kafka tests)" java_tests
step "python: pytest (clients/python, with the integration test)" python_tests
