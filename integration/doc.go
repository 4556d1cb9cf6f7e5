// Package integration holds kdelay's end-to-end tests.
//
// The tests talk to a Kafka broker chosen by the KDELAY_TEST_BROKERS
// environment variable (a comma-separated list of host:port seeds). When it is
// set, the tests run against that real broker — in CI, a single Apache Kafka
// node started from the Maven-resolved jars by .ci/kafka.sh (see docs/ci.md).
// When it is unset, tests that need a real broker skip, and scenario tests use
// an in-process kfake cluster instead.
//
// This change adds only the real-broker smoke tests (topic creation with 18
// partitions, a produce/consume round trip with headers, and a broker
// restart); a later change adds the delayed-delivery scenarios.
package integration
