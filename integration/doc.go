// Package integration holds kdelay's end-to-end tests: they run the real
// kdelay binary (built once per test binary from ./cmd/kdelay, with -race
// when the tests have it) as child processes against a Kafka broker, and
// check the guarantees of docs/guarantees.md from outside, the way an operator sees
// them: every record delivered, none early, duplicates counted.
//
// The broker, in this order:
//
//  1. KDELAY_TEST_BROKERS (comma-separated host:port seeds): a real
//     cluster. In CI, one Apache Kafka node started from the
//     Maven-resolved jars by .ci/kafka.sh (see docs/dev/ci.md);
//     KDELAY_KAFKA_CTL (.ci/kafka.sh) lets the broker-restart tests restart
//     it.
//  2. KDELAY_TEST_DOCKER=1: a pinned Kafka image started by
//     testcontainers-go from the nested module integration/containers
//     (its own go.mod keeps Docker dependencies out of the main module);
//     skipped cleanly, falling back to 3, without a Docker engine.
//  3. Otherwise an in-process kfake cluster started by TestMain; the
//     relay children connect to its address.
//
// Two more tiers carry the build tag cluster (docs/dev/ci.md, .ci/cluster.sh):
// cluster_test.go, failover of a three-broker cluster (KDELAY_TEST_CLUSTER=3,
// .ci/kafka.sh start --brokers 3) under a steady load, and security_test.go,
// a broker with SASL_SSL, mutual TLS and ACLs that the test starts itself
// (KDELAY_TEST_SECURITY=1). With the tag and CI=true their missing
// variables fail the run instead of skipping.
//
// Each scenario creates its own delay, dead-letter and target topics and
// consumer group (unique names), so all of them share one broker and run in
// parallel; the broker-restart test runs alone. Relays are started with
// KDELAY_* variables, a private data directory, an HTTP port polled on
// /readyz, and JSON logs captured to a file whose tail is printed on
// failure; they are stopped with SIGTERM (exit 0 expected) or SIGKILL.
//
// Every scenario reports, on one line and as a row of the markdown file
// named by KDELAY_TEST_REPORT, its delivery mode, the records sent,
// delivered, duplicated, early (must be 0) and lost (must be 0), and the
// lateness p50/p99/max, both as forwarded record timestamp − kdelay-due-at
// and as observed arrival − kdelay-due-at; TestMain prints all the rows,
// by scenario and mode, as one table at the end. The fault scenarios of
// faultmodes_test.go run in both delivery modes: exactly-once allows no
// duplicate, at-least-once only records in flight at the fault
// (checkInFlight). docs/dev/testing.md lists the scenarios, how to run
// each tier, and the figures of a real-broker run.
package integration
