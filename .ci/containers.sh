#!/usr/bin/env bash
# .ci/containers.sh — kdelay's container tier (make test-containers; CI runs
# it on a fresh clone with CI=true):
#
#   1. the kdelay image, built with podman and no registry
#      (.ci/image.sh build), then its smoke test against a real broker
#      (.ci/image.sh smoke: forwards on time as non-root, /readyz, exit 0
#      on SIGTERM);
#   2. the Kafka image built on this machine (.ci/kafka-image.sh), podman's
#      Docker-compatible API on a private socket (.ci/podman.sh service),
#      and the tests of the testcontainers module testcontainers/kdelay
#      against both images, with Ryuk off; then integration/containers
#      runs a short part of the end-to-end suite (the kdelay binary as
#      child processes) against a container of the Kafka image.
#
#   bash .ci/containers.sh [smoke|module|all]   (default all)
#
# Nothing here skips: a missing package is installed (apt-get) and a step
# that cannot run fails. The kdelay image is tagged localhost/kdelay:ci-<pid>
# and removed at the end; the Kafka image and the root filesystem it is
# built from are cached (see .ci/kafka-image.sh).
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
ROOT="$PWD"
# shellcheck source=podman.sh
source "$ROOT/.ci/podman.sh"
WHAT="${1:-all}"
case "$WHAT" in smoke|module|all) ;; *) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 2 ;; esac

T0=$SECONDS
step() { printf '== [+%ss] %s\n' "$((SECONDS - T0))" "$*"; }

IMAGE="localhost/kdelay:ci-$$"
WORK="$(mktemp -d "${TMPDIR:-/tmp}/kdelay-containers.XXXXXX")"
cleanup() {
  local rc=$?
  set +e
  podman_service_stop "$WORK/service"
  pm rmi -f "$IMAGE" >/dev/null 2>&1
  rm -rf "$WORK"
  exit "$rc"
}
trap cleanup EXIT

step "podman, runc, jq, debootstrap"
podman_ensure debootstrap
podman --version

step "kdelay image: $IMAGE (.ci/image.sh build)"
bash .ci/image.sh build "$IMAGE" ci
pm image inspect --format 'user {{.Config.User}}, labels {{json .Config.Labels}}' "$IMAGE"

if [[ "$WHAT" != module ]]; then
  step "kdelay image: smoke test against a real broker (.ci/image.sh smoke)"
  bash .ci/image.sh smoke "$IMAGE"
fi
[[ "$WHAT" == smoke ]] && { step "done"; exit 0; }

step "Kafka image (.ci/kafka-image.sh)"
KAFKA_IMAGE="$(bash .ci/kafka-image.sh)"
echo "kafka image: $KAFKA_IMAGE"

step "podman system service (Docker-compatible API, the runtime wrapper)"
DOCKER_HOST="$(podman_service_start "$WORK/service")"
export DOCKER_HOST TESTCONTAINERS_RYUK_DISABLED=true
echo "DOCKER_HOST=$DOCKER_HOST"

step "testcontainers/kdelay: vet (with the docs' example, -tags example) and test"
(
  cd testcontainers/kdelay
  go vet ./...
  go vet -tags example ./...
  # CI=true (CI sets it) turns a missing image or engine into a failure.
  set +e
  KDELAY_TC_IMAGE="$IMAGE" KDELAY_TC_KAFKA_IMAGE="$KAFKA_IMAGE" \
    go test -race -count=1 -v -timeout 10m ./... 2>&1 | tee "$WORK/module.log" | grep --line-buffered -v '^        {'
  rc=${PIPESTATUS[0]}
  set -e
  ((rc == 0)) || exit "$rc"
  # The images and the engine are all here: nothing may skip.
  if grep -- '--- SKIP' "$WORK/module.log"; then echo "== a test skipped"; exit 1; fi
) || { echo "== podman service log (tail)"; tail -n 30 "$WORK/service/service.log"; exit 1; }

step "integration/containers: the suite's short part against the Kafka image"
(
  cd integration/containers
  # The module replaces the main module with ../..: each dependency the
  # main module adds changes its go.mod. Resolve that here (-mod=mod)
  # rather than fail, and say so; `go mod tidy` there makes it permanent.
  export GOFLAGS="${GOFLAGS:+$GOFLAGS }-mod=mod"
  cp go.mod "$WORK/containers.go.mod"
  go vet ./...
  if ! cmp -s go.mod "$WORK/containers.go.mod"; then
    echo "== note: integration/containers/go.mod lags the main module (run go mod tidy there):"
    diff "$WORK/containers.go.mod" go.mod || true
  fi
  set +e
  KDELAY_TEST_DOCKER=1 KDELAY_TC_KAFKA_IMAGE="$KAFKA_IMAGE" \
    KDELAY_TEST_RUN='^(TestRealBrokerTopicRoundTrip|TestDeadLetter)$' \
    go test -count=1 -v -timeout 20m ./... 2>&1 | tee "$WORK/suite.log" | grep --line-buffered -v '^        {'
  rc=${PIPESTATUS[0]}
  set -e
  ((rc == 0)) || exit "$rc"
  if grep -- '--- SKIP' "$WORK/suite.log"; then echo "== a test skipped"; exit 1; fi
)
step "done"
