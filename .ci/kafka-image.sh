#!/usr/bin/env bash
# .ci/kafka-image.sh — build the Apache Kafka image of kdelay's container
# tier on this machine, with podman and no registry; prints its name.
#
#   bash .ci/kafka-image.sh            build (or reuse) and print the name
#
# 1. Base: a Debian bookworm root filesystem made by debootstrap
#    (--variant=minbase, with openjdk-17-jre-headless), cached as a tarball
#    in $KDELAY_CACHE/rootfs/ and imported with `podman import`.
# 2. Kafka: .ci/kafka-image/Containerfile on that base, with the jars
#    .ci/kafka.sh resolves with Maven (cached in
#    $KDELAY_CACHE/kafka-<version>/libs) and kafka-image/kafka-run.sh.
# The image tag carries a hash of its inputs, so an image already built
# from the same inputs is reused (a warm run takes seconds).
#
# Environment:
#   KDELAY_KAFKA_VERSION   Apache Kafka version (default 4.4.0, as kafka.sh)
#   KDELAY_CACHE           cache root (default $HOME/.cache/kdelay)
#   KDELAY_DEBIAN_MIRROR   the Debian mirror for debootstrap (default: the
#                          first bookworm source of this machine's apt)
#   KDELAY_KAFKA_IMAGE     image name without tag (default localhost/kdelay-kafka)
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
ROOT="$PWD"
# shellcheck source=podman.sh
source "$ROOT/.ci/podman.sh"

KAFKA_VERSION="${KDELAY_KAFKA_VERSION:-4.4.0}"
NAME="${KDELAY_KAFKA_IMAGE:-localhost/kdelay-kafka}"
SUITE=bookworm
JRE=openjdk-17-jre-headless
BASE="localhost/kdelay-debian:$SUITE-jre17"
ROOTFS_TAR="$KDELAY_CACHE/rootfs/debian-$SUITE-minbase-jre17.tar"

log() { printf '[kafka-image.sh] %s\n' "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

# debian_mirror: the mirror this machine's apt uses for Debian (deb822
# sources first, then sources.list), unless KDELAY_DEBIAN_MIRROR says.
debian_mirror() {
  if [[ -n "${KDELAY_DEBIAN_MIRROR:-}" ]]; then echo "$KDELAY_DEBIAN_MIRROR"; return; fi
  local m=""
  if compgen -G "/etc/apt/sources.list.d/*.sources" >/dev/null; then
    m="$(awk '/^URIs:/ { u = $2 } /^Suites:/ && / '"$SUITE"'( |$)/ && u !~ /security/ { print u; exit }' \
      /etc/apt/sources.list.d/*.sources)"
  fi
  if [[ -z "$m" && -f /etc/apt/sources.list ]]; then
    m="$(awk '$1 == "deb" && $3 == "'"$SUITE"'" { print $2; exit }' /etc/apt/sources.list)"
  fi
  [[ -n "$m" ]] || die "no Debian $SUITE mirror in /etc/apt (set KDELAY_DEBIAN_MIRROR)"
  echo "$m"
}

# base_image: the debootstrap root filesystem as a podman image.
base_image() {
  if pm image exists "$BASE"; then
    log "base: $BASE (present)"
    return
  fi
  if [[ ! -s "$ROOTFS_TAR" ]]; then
    podman_ensure debootstrap
    local t0=$SECONDS work mirror
    mirror="$(debian_mirror)"
    mkdir -p "$(dirname "$ROOTFS_TAR")"
    work="$(mktemp -d "$(dirname "$ROOTFS_TAR")/.debootstrap.XXXXXX")"
    log "base: debootstrap --variant=minbase --include=$JRE $SUITE (mirror from apt; about a minute)"
    if ! debootstrap --variant=minbase --include="$JRE" "$SUITE" "$work/root" "$mirror" >"$work/debootstrap.log" 2>&1; then
      tail -n 30 "$work/debootstrap.log" >&2
      rm -rf "$work"
      die "debootstrap failed (log tail above)"
    fi
    rm -rf "$work/root/var/cache/apt/archives/"*.deb "$work/root/var/lib/apt/lists/"*
    tar --numeric-owner -C "$work/root" -cf "$work/rootfs.tar" .
    mv "$work/rootfs.tar" "$ROOTFS_TAR"
    rm -rf "$work"
    log "base: root filesystem cached in $ROOTFS_TAR ($(du -h "$ROOTFS_TAR" | cut -f1), $((SECONDS - t0))s)"
  fi
  pm import -q --change 'CMD ["/bin/bash"]' "$ROOTFS_TAR" "$BASE" >/dev/null
  log "base: imported $BASE"
}

podman_ensure
base_image
libs="$(bash "$ROOT/.ci/kafka.sh" jars)"
[[ -d "$libs" ]] || die "no jar directory from .ci/kafka.sh jars"

hash="$( (echo "$KAFKA_VERSION"; pm image inspect --format '{{.Id}}' "$BASE"; cat "$ROOT/.ci/kafka-image/Containerfile" "$ROOT/.ci/kafka-image/kafka-run.sh"; ls "$libs") | sha256sum | cut -c1-12)"
TAG="$NAME:$KAFKA_VERSION-$hash"
if pm image exists "$TAG"; then
  log "kafka: $TAG (present)"
else
  t0=$SECONDS
  ctx="$(mktemp -d "${TMPDIR:-/tmp}/kdelay-kafka-image.XXXXXX")"
  trap 'rm -rf "$ctx"' EXIT
  cp -r "$libs" "$ctx/libs"
  cp "$ROOT/.ci/kafka-image/kafka-run.sh" "$ctx/"
  pm build -q --build-arg BASE="$BASE" --build-arg KAFKA_VERSION="$KAFKA_VERSION" \
    -f "$ROOT/.ci/kafka-image/Containerfile" -t "$TAG" "$ctx" >/dev/null
  log "kafka: built $TAG in $((SECONDS - t0))s"
  # Images of earlier inputs: removed unless a container still uses one.
  for old in $(pm images --format '{{.Repository}}:{{.Tag}}' | grep -F "$NAME:$KAFKA_VERSION-" | grep -vxF "$TAG"); do
    pm rmi "$old" >/dev/null 2>&1 && log "kafka: removed $old" || true
  done
fi
pm tag "$TAG" "$NAME:$KAFKA_VERSION"
echo "$TAG"
