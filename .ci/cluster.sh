#!/usr/bin/env bash
# .ci/cluster.sh — the cluster, security and container tiers of CI (issue
# 15), one tier per call so that .ci/run times each in its own step:
#
#   bash .ci/cluster.sh cluster     a 3-broker cluster (.ci/kafka.sh start
#                                   --brokers 3) and the failover tests
#                                   (integration/cluster_test.go)
#   bash .ci/cluster.sh security    the SASL_SSL / mTLS / ACL tests
#                                   (integration/security_test.go); they
#                                   start their own secured broker
#   bash .ci/cluster.sh containers  the container tier: .ci/containers.sh
#
# The cluster and security tests carry the build tag `cluster`; with the
# tag and CI=true a missing variable fails them instead of skipping.
# Environment: KDELAY_TEST_CLUSTER_RATE (records/s of the steady load,
# default 100), KDELAY_TEST_CLUSTER_VARS (extra relay settings), and those
# of .ci/kafka.sh. See docs/dev/ci.md.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
ROOT="$PWD"
KAFKA_SH="$ROOT/.ci/kafka.sh"
TIER="${1:-}"

# helm (installed by charts/check.sh with go install) for the chart test.
gobin="$(go env GOBIN)"
[[ -n "$gobin" ]] || gobin="$(go env GOPATH | cut -d: -f1)/bin"
export PATH="$PATH:$gobin"

gotest() { # gotest RUN-PATTERN: the tagged integration tests, verbose, with -race
  go vet -tags cluster ./integration/
  local rc
  set +e
  go test -tags cluster -race -count=1 -v -timeout 15m -run "$1" ./integration/ 2>&1 \
    | tee "$LOG" | grep --line-buffered -v '^        {' # the relays' JSON log lines of a failure stay in $LOG
  rc=${PIPESTATUS[0]}
  set -e
  echo "== figures"
  grep -h 'REPORT ' "$LOG" | sed 's/^ *[a-z_]*_test.go:[0-9]*: //' || true
  return "$rc"
}

case "$TIER" in
  cluster)
    export KDELAY_KAFKA_STATE
    KDELAY_KAFKA_STATE="$(mktemp -d "${TMPDIR:-/tmp}/kdelay-ci-cluster.XXXXXX")"
    LOG="$KDELAY_KAFKA_STATE/test.log"
    stop_cluster() {
      local rc=$?
      set +e
      if ((rc != 0)); then
        echo "== cluster logs (tail)"
        bash "$KAFKA_SH" logs 40
      fi
      echo "== kafka: stop (cluster)"
      bash "$KAFKA_SH" stop
      ((rc == 0)) && rm -rf "$KDELAY_KAFKA_STATE"
      exit "$rc"
    }
    trap stop_cluster EXIT
    echo "== kafka: start --brokers 3"
    BROKERS="$(bash "$KAFKA_SH" start --brokers 3)"
    bash "$KAFKA_SH" status
    echo "== cluster started with 3 brokers: $BROKERS"
    KDELAY_TEST_BROKERS="$BROKERS" KDELAY_KAFKA_CTL="$KAFKA_SH" KDELAY_TEST_CLUSTER=3 \
      gotest '^TestCluster'
    ;;
  security)
    LOG="$(mktemp "${TMPDIR:-/tmp}/kdelay-ci-security.XXXXXX.log")"
    KDELAY_TEST_SECURITY=1 KDELAY_KAFKA_CTL="$KAFKA_SH" gotest '^TestSecurity$'
    rm -f "$LOG"
    ;;
  containers)
    exec bash "$ROOT/.ci/containers.sh"
    ;;
  *)
    sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'
    exit 2
    ;;
esac
