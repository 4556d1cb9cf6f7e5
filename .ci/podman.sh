#!/usr/bin/env bash
# .ci/podman.sh — podman as kdelay's container steps use it: Debian's
# podman and runc, run through the OCI runtime wrapper .ci/podman-runtime
# (which drops the rlimits a sandbox may refuse). Sourced by .ci/image.sh,
# .ci/kafka-image.sh and .ci/containers.sh; also a command:
#
#   bash .ci/podman.sh ensure          install what is missing (apt-get)
#   bash .ci/podman.sh podman ARGS...  podman --runtime <wrapper> ARGS...
#   bash .ci/podman.sh service start DIR | stop DIR
#                                      podman's Docker-compatible API on
#                                      unix://DIR/podman.sock (prints the
#                                      DOCKER_HOST value), or stop it
#
# Packages: podman, runc, jq (the wrapper edits config.json with it),
# ca-certificates, and with `ensure debootstrap` also debootstrap. Missing
# ones are installed with apt-get (as root); when that is impossible the
# step fails: it never skips.
set -euo pipefail

PODMAN_SH_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
KDELAY_OCI_RUNTIME="${KDELAY_OCI_RUNTIME:-$PODMAN_SH_DIR/podman-runtime}"
KDELAY_CACHE="${KDELAY_CACHE:-${HOME:-/root}/.cache/kdelay}"

pm_log() { printf '[%s] %s\n' "$(basename "$0")" "$*" >&2; }
pm_die() { pm_log "ERROR: $*"; exit 1; }

# podman_ensure [debootstrap]: the packages of the container steps.
podman_ensure() {
  local want=(podman runc jq) missing=() p
  [[ "${1:-}" == debootstrap ]] && want+=(debootstrap)
  for p in "${want[@]}"; do
    command -v "$p" >/dev/null 2>&1 || [[ -x "/usr/sbin/$p" ]] || missing+=("$p")
  done
  [[ -f /etc/ssl/certs/ca-certificates.crt ]] || missing+=(ca-certificates)
  ((${#missing[@]} == 0)) && return 0
  pm_log "installing ${missing[*]} (apt-get)"
  command -v apt-get >/dev/null || pm_die "missing ${missing[*]} and no apt-get to install them"
  local apt=(apt-get)
  ((EUID == 0)) || apt=(sudo -n apt-get)
  if ! DEBIAN_FRONTEND=noninteractive "${apt[@]}" install -y -qq "${missing[@]}" >/dev/null 2>&1; then
    "${apt[@]}" update -qq >/dev/null 2>&1 || true
    DEBIAN_FRONTEND=noninteractive "${apt[@]}" install -y -qq "${missing[@]}" >/dev/null \
      || pm_die "apt-get could not install ${missing[*]}"
  fi
}

# pm ARGS...: podman with the wrapper as its OCI runtime.
pm() { podman --runtime "$KDELAY_OCI_RUNTIME" "$@"; }

# podman_service_start DIR: the Docker-compatible API on DIR/podman.sock,
# its containers run through the wrapper; prints unix://DIR/podman.sock.
podman_service_start() {
  local dir="$1" sock="$1/podman.sock"
  mkdir -p "$dir"
  rm -f "$sock"
  # The service's own containers.conf names the wrapper as its runtime, so
  # that containers created through the API (testcontainers) use it too.
  cat >"$dir/containers.conf" <<CONF
[engine]
runtime = "kdelay-runc"

[engine.runtimes]
kdelay-runc = ["$KDELAY_OCI_RUNTIME"]
CONF
  CONTAINERS_CONF="$dir/containers.conf" setsid podman --runtime "$KDELAY_OCI_RUNTIME" \
    system service --time=0 "unix://$sock" </dev/null >"$dir/service.log" 2>&1 &
  echo $! >"$dir/service.pid"
  local i
  for i in $(seq 1 100); do
    if [[ -S "$sock" ]] && curl -fsS --unix-socket "$sock" http://d/_ping >/dev/null 2>&1; then
      echo "unix://$sock"
      return 0
    fi
    kill -0 "$(cat "$dir/service.pid")" 2>/dev/null || { cat "$dir/service.log" >&2; pm_die "podman system service exited"; }
    sleep 0.1
  done
  cat "$dir/service.log" >&2
  pm_die "podman system service did not answer on $sock in 10s"
}

# podman_service_stop DIR: stops the service podman_service_start DIR began.
podman_service_stop() {
  local dir="$1" pid
  [[ -f "$dir/service.pid" ]] || return 0
  pid="$(cat "$dir/service.pid")"
  kill -TERM "$pid" 2>/dev/null || true
  for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  kill -KILL "$pid" 2>/dev/null || true
  rm -f "$dir/service.pid" "$dir/podman.sock"
}

if [[ "${BASH_SOURCE[0]}" == "$0" ]]; then
  case "${1:-}" in
    ensure) shift; podman_ensure "$@" ;;
    podman) shift; pm "$@" ;;
    service)
      case "${2:-}" in
        start) podman_service_start "${3:?service start DIR}" ;;
        stop) podman_service_stop "${3:?service stop DIR}" ;;
        *) pm_die "usage: $0 service start|stop DIR" ;;
      esac
      ;;
    *) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 2 ;;
  esac
fi
