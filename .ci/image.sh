#!/usr/bin/env bash
# .ci/image.sh — build kdelay's container image, and smoke-test it against a
# real broker.
#
#   bash .ci/image.sh build IMAGE [VERSION]   (make image IMAGE=...)
#   bash .ci/image.sh smoke IMAGE             (run by .ci/containers.sh)
#
# build: with a reachable Docker engine, `docker build` of the Dockerfile
# (its golang stage needs a registry). Otherwise podman, with no registry:
# the static binary is built with the host's Go exactly as the Dockerfile's
# build stage does, the files that stage would hold are laid out in a
# context directory, and the Dockerfile's last stage is built from them
# (each `COPY --from=build /p` becomes `COPY p`), through the OCI runtime
# wrapper (.ci/podman.sh). KDELAY_IMAGE_BUILDER=docker|podman forces one.
#
# smoke: the relay runs from IMAGE (podman, --network host, as the image's
# non-root user) against a real Apache Kafka (.ci/kafka.sh, or the brokers
# in KDELAY_TEST_BROKERS); records written by `kdelay send` and by kcat
# must be forwarded, none early and each within KDELAY_SMOKE_LATE_MS
# (default 2000) of its due time; /readyz must answer 200; `podman stop`
# (SIGTERM) must end it with exit code 0 before its 30 s grace runs out.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
ROOT="$PWD"
# shellcheck source=podman.sh
source "$ROOT/.ci/podman.sh"

log() { printf '[image.sh] %s\n' "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

# docker_engine: true when docker reaches an engine that is Docker (podman's
# compatible API cannot pull the Dockerfile's golang stage here).
docker_engine() {
  command -v docker >/dev/null 2>&1 || return 1
  local comps
  comps="$(docker version --format '{{range .Server.Components}}{{.Name}} {{end}}' 2>/dev/null)" || return 1
  [[ -n "$comps" && "$comps" != *Podman* ]]
}

# context_layout DIR VERSION: DIR holds what the Dockerfile's build stage
# holds at the paths its last stage copies from.
context_layout() {
  local ctx="$1" version="$2"
  mkdir -p "$ctx/src/bin" "$ctx/etc/ssl/certs" "$ctx/usr/local/go/lib/time" \
    "$ctx/rootfs/etc" "$ctx/rootfs/data" "$ctx/rootfs/tmp"
  # The Dockerfile's build command, with the host's Go.
  CGO_ENABLED=0 go build -trimpath -buildvcs=false -ldflags="-s -w -X main.version=${version}" \
    -o "$ctx/src/bin/kdelay" ./cmd/kdelay
  cp /etc/ssl/certs/ca-certificates.crt "$ctx/etc/ssl/certs/"
  cp "$(go env GOROOT)/lib/time/zoneinfo.zip" "$ctx/usr/local/go/lib/time/"
  printf 'root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n' >"$ctx/rootfs/etc/passwd"
  printf 'root:x:0:\nnonroot:x:65532:\n' >"$ctx/rootfs/etc/group"
  chmod 1777 "$ctx/rootfs/tmp"
  # The Dockerfile's last stage, COPY --from=build /a /b c -> COPY a b c.
  awk '
    /^FROM / { buf = "" }
    /^COPY --from=build / {
      n = split($0, f, " "); out = "COPY"
      for (i = 3; i <= n; i++) { a = f[i]; if (i < n && a !~ /^--/) sub(/^\//, "", a); out = out " " a }
      buf = buf out "\n"; next
    }
    { buf = buf $0 "\n" }
    END { printf "%s", buf }' Dockerfile >"$ctx/Containerfile"
  grep -q -- '--from=' "$ctx/Containerfile" && die "the Dockerfile's last stage copies from a stage other than build"
  head -n 1 "$ctx/Containerfile" | grep -q '^FROM scratch' || die "the Dockerfile's last stage is not FROM scratch"
}

cmd_build() {
  local image="${1:?build IMAGE [VERSION]}" version="${2:-}"
  [[ -n "$version" ]] || version="$(git describe --tags --always --dirty 2>/dev/null || echo dev)"
  local builder="${KDELAY_IMAGE_BUILDER:-}"
  if [[ -z "$builder" ]]; then
    if docker_engine; then builder=docker; else builder=podman; fi
  fi
  local t0=$SECONDS
  case "$builder" in
    docker)
      log "docker build -t $image (version $version)"
      docker build --build-arg VERSION="$version" -t "$image" .
      ;;
    podman)
      podman_ensure
      local ctx
      ctx="$(mktemp -d "${TMPDIR:-/tmp}/kdelay-image.XXXXXX")"
      # shellcheck disable=SC2064
      trap "rm -rf '$ctx'" EXIT
      context_layout "$ctx" "$version"
      log "podman build -t $image (version $version; the Dockerfile's last stage, binary from the host's Go)"
      pm build -q --build-arg VERSION="$version" -f "$ctx/Containerfile" -t "$image" "$ctx" >/dev/null
      ;;
    *) die "KDELAY_IMAGE_BUILDER=$builder: want docker or podman" ;;
  esac
  log "built $image with $builder in $((SECONDS - t0))s"
}

# free_port: a port nothing listens on.
free_port() {
  local p
  for _ in $(seq 1 100); do
    p=$((20000 + RANDOM % 12000))
    ss -Htln "sport = :$p" 2>/dev/null | grep -q . || { echo "$p"; return; }
  done
  die "no free port"
}

cmd_smoke() {
  local image="${1:?smoke IMAGE}"
  podman_ensure
  command -v kcat >/dev/null || {
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq kcat >/dev/null 2>&1 \
      || { apt-get update -qq >/dev/null 2>&1; DEBIAN_FRONTEND=noninteractive apt-get install -y -qq kcat >/dev/null; } \
      || die "kcat is needed (Debian package kcat)"
  }
  local late_ms="${KDELAY_SMOKE_LATE_MS:-2000}"
  work="$(mktemp -d "${TMPDIR:-/tmp}/kdelay-smoke.XXXXXX")"
  name="kdelay-smoke-$$"
  brokers="${KDELAY_TEST_BROKERS:-}"
  own_broker=0
  smoke_cleanup() {
    local rc=$?
    set +e
    if ((rc != 0)); then
      log "relay log (tail):"
      pm logs --tail 40 "$name" >&2 2>&1
    fi
    pm rm -f -v "$name" >/dev/null 2>&1
    if ((own_broker)); then
      ((rc != 0)) && KDELAY_KAFKA_STATE="$work/kafka" bash "$ROOT/.ci/kafka.sh" logs 40 >&2
      KDELAY_KAFKA_STATE="$work/kafka" bash "$ROOT/.ci/kafka.sh" stop >/dev/null 2>&1
    fi
    rm -rf "$work"
    exit "$rc"
  }
  trap smoke_cleanup EXIT
  if [[ -z "$brokers" ]]; then
    brokers="$(KDELAY_KAFKA_STATE="$work/kafka" bash "$ROOT/.ci/kafka.sh" start)"
    own_broker=1
  fi
  log "broker $brokers"

  # The host's kdelay (same source as the image) creates topics and sends.
  local bin="$work/kdelay"
  go build -o "$bin" ./cmd/kdelay
  local topic="smoke-$$-$RANDOM" target port n=40
  target="$topic-out"
  port="$(free_port)"
  "$bin" topic create --brokers "$brokers" --topic "$topic" >/dev/null
  # The target: a one-level delay topic's layout is one partition; its
  # companion .dlq and .cancel topics are unused.
  "$bin" topic create --brokers "$brokers" --topic "$target" --levels 1s >/dev/null

  pm run -d --name "$name" --network host \
    -e KDELAY_BROKERS="$brokers" -e KDELAY_TOPIC="$topic" -e KDELAY_GROUP="$topic-relay" \
    -e KDELAY_HTTP_ADDR="127.0.0.1:$port" -e KDELAY_LOG_FORMAT=json \
    "$image" >/dev/null
  local pid uid
  pid="$(pm inspect --format '{{.State.Pid}}' "$name")"
  uid="$(awk '/^Uid:/ { print $2 }' "/proc/$pid/status")"
  [[ "$uid" == 65532 ]] || die "the relay runs as uid $uid, want 65532 (the image's non-root user)"
  log "relay: container $name, pid $pid, uid $uid, http 127.0.0.1:$port"

  local deadline=$((SECONDS + 60)) code=""
  until code="$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/readyz")" && [[ "$code" == 200 ]]; do
    [[ "$(pm inspect --format '{{.State.Running}}' "$name")" == true ]] || die "the relay exited before it was ready"
    ((SECONDS < deadline)) || die "/readyz answered ${code:-nothing} for 60s"
    sleep 0.2
  done
  log "relay: /readyz 200"

  "$bin" send --brokers "$brokers" --topic "$topic" --target "$target" --delay 3s \
    --count "$n" --key 'send-{i}' --value 'v{i}' >/dev/null
  # kcat: a producer that is not kdelay's, headers by hand; partition 0 is
  # level 1 (1s), the level of a 2 s delay.
  echo "from-kcat" | kcat -P -b "$brokers" -t "$topic" -p 0 -k kcat-0 \
    -H "kdelay-target=$target" -H "kdelay-delay=2s"
  local want=$((n + 1))
  log "sent $n records with kdelay send (3s) and 1 with kcat (2s); waiting for $want on $target"
  timeout 60 kcat -C -b "$brokers" -t "$target" -o beginning -c "$want" -q \
    -f '%T %k %h\n' >"$work/out.txt" || die "forwarded $(wc -l <"$work/out.txt") of $want records in 60s"

  # %h: k=v,k=v; the relay stamps kdelay-due-at (epoch ms) and sends at the
  # record's timestamp (%T).
  awk -v late="$late_ms" -v want="$want" '
    {
      due = ""
      n = split($3, hs, ",")
      for (i = 1; i <= n; i++) if (hs[i] ~ /^kdelay-due-at=/) { due = substr(hs[i], 15) }
      if (due == "") { print "no kdelay-due-at on " $2; bad++; next }
      d = $1 - due
      if (d < 0) { print "EARLY by " (-d) " ms: " $2; bad++ }
      if (d > late) { print "late by " d " ms (> " late "): " $2; bad++ }
      if (d > max) max = d
      keys[$2] = 1; got++
    }
    END {
      k = 0; for (x in keys) k++
      if (got != want || k != want) { print "got " got " records, " k " distinct keys, want " want; bad++ }
      if (!("kcat-0" in keys)) { print "the kcat record was not forwarded"; bad++ }
      printf "forwarded %d records, none early, max lateness %d ms\n", got, max
      exit bad > 0
    }' "$work/out.txt" >&2 || die "records not forwarded on time (above)"

  code="$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/readyz")"
  [[ "$code" == 200 ]] || die "/readyz answered $code after forwarding"

  local t0=$SECONDS rc
  pm stop --time 30 "$name" >/dev/null
  rc="$(pm inspect --format '{{.State.ExitCode}}' "$name")"
  [[ "$rc" == 0 ]] || die "the relay exited with $rc on SIGTERM, want 0"
  log "relay: SIGTERM -> exit 0 in $((SECONDS - t0))s"
  log "smoke passed: $image"
}

case "${1:-}" in
  build) shift; cmd_build "$@" ;;
  smoke) shift; cmd_smoke "$@" ;;
  *) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 2 ;;
esac
