# kdelay container image.
#
#   docker build --build-arg VERSION="$(git describe --tags --always --dirty)" -t kdelay:dev .
#
# Stage 1 builds a static binary; stage 2 is an empty (scratch) image holding
# only that binary, CA certificates, Go's zoneinfo, a passwd entry for the
# non-root user 65532 and the /data directory for the timer wheel.
#
# Without a Docker engine, `make image` (.ci/image.sh) builds the same image
# with podman and no registry: it builds the binary with the host's Go, lays
# out what stage 1 would hold, and builds this file's last stage (from its
# last FROM on) with each `COPY --from=build /path` read from that layout.
# The last stage is thus the one description of the image for both paths:
# keep its COPY --from=build sources absolute paths of the build stage.

ARG GO_VERSION=1.26.8

FROM golang:${GO_VERSION} AS build
WORKDIR /src

# Module-download layer: re-used as long as go.mod and go.sum do not change.
COPY go.mod go.sum ./
RUN go mod download

COPY . .

# The exact build command CI runs too (keep the two in sync).
ARG VERSION=dev
RUN CGO_ENABLED=0 go build -trimpath -buildvcs=false -ldflags="-s -w -X main.version=${VERSION}" -o bin/kdelay ./cmd/kdelay

# Minimal root filesystem for the runtime stage.
RUN mkdir -p /rootfs/etc /rootfs/data /rootfs/tmp \
 && printf 'root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n' > /rootfs/etc/passwd \
 && printf 'root:x:0:\nnonroot:x:65532:\n' > /rootfs/etc/group \
 && chmod 1777 /rootfs/tmp \
 && chown 65532:65532 /rootfs/data

FROM scratch
ARG VERSION=dev
LABEL org.opencontainers.image.title="kdelay" \
      org.opencontainers.image.description="Delayed delivery for Apache Kafka: a relay forwards each record of the delay topic to its target when it is due" \
      org.opencontainers.image.source="https://github.com/kdelay/kdelay" \
      org.opencontainers.image.url="https://github.com/kdelay/kdelay" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.licenses="Apache-2.0"
COPY --from=build /etc/ssl/certs/ca-certificates.crt /etc/ssl/certs/ca-certificates.crt
COPY --from=build /usr/local/go/lib/time/zoneinfo.zip /usr/local/go/lib/time/zoneinfo.zip
COPY --from=build /rootfs/etc/passwd /rootfs/etc/group /etc/
COPY --from=build /rootfs/tmp /tmp
COPY --from=build --chown=65532:65532 /rootfs/data /data
COPY --from=build /src/bin/kdelay /kdelay

ENV ZONEINFO=/usr/local/go/lib/time/zoneinfo.zip \
    KDELAY_DATA_DIR=/data \
    KDELAY_HTTP_ADDR=:8080
USER 65532:65532
EXPOSE 8080
VOLUME ["/data"]
ENTRYPOINT ["/kdelay"]
CMD ["run"]
