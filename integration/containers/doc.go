// Package containers is the container tier of kdelay's end-to-end suite
// (tier 4, docs/dev/testing.md), a module of its own so that testcontainers-go and
// the Docker client stay out of the main module's dependencies.
//
// Its test starts a pinned Apache Kafka image with testcontainers-go (or,
// when KDELAY_TC_KAFKA_IMAGE names one, a Kafka image built locally by
// .ci/kafka-image.sh, on the host network) and runs the package
// github.com/kdelay/kdelay/integration against it (the real kdelay binary
// as child processes, every scenario). It is opt-in and skips cleanly
// without a Docker engine:
//
//	cd integration/containers && KDELAY_TEST_DOCKER=1 go test -v .
//
// or, from the repository root, KDELAY_TEST_DOCKER=1 go test ./integration/,
// which comes here when KDELAY_TEST_BROKERS is unset and falls back to the
// in-process kfake broker when no Docker engine is reachable. See
// docs/dev/testing.md.
package containers
