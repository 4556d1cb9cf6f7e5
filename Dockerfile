# kdelay container image.
#
#   docker build --build-arg VERSION="$(git describe --tags --always --dirty)" -t kdelay:dev .
#
# Stage 1 builds a static binary; stage 2 is an empty (scratch) image holding
# only that binary, CA certificates, Go's zoneinfo, a passwd entry for the
# non-root user 65532 and the /data directory for the timer wheel.

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
