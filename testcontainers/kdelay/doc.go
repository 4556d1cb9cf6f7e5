// Package kdelay starts the kdelay relay in a container for integration
// tests, as a testcontainers-go module: Kafka comes from testcontainers'
// own Kafka module (or any broker the test reaches), and Run starts
// kdelay beside it, creates its topics and returns once the relay answers
// /readyz.
//
//	kafkaC, err := kafka.Run(ctx, "confluentinc/confluent-local:7.5.0")
//	testcontainers.CleanupContainer(t, kafkaC)
//	brokers, err := kafkaC.Brokers(ctx) // localhost:<mapped port>
//
//	relay, err := kdelay.Run(ctx, "kdelay:0.1.0",
//		kdelay.WithBrokers(brokers...),
//		kdelay.WithHostNetwork(), // reaches localhost:<mapped port>
//		kdelay.WithLevels("1s 5s 30s"),
//	)
//	testcontainers.CleanupContainer(t, relay)
//
// Then produce to the delay topic (Topic, default "delay-topic") with the
// kdelay-target and kdelay-delay headers and consume the target topic.
//
// # Networking
//
// kdelay must reach the brokers at the addresses they advertise. With
// WithHostNetwork the relay shares the host's network (Linux engines:
// Docker and podman; not Docker Desktop), so the host-mapped address a
// Kafka container advertises to the test works for the relay too, and the
// relay's HTTP port is a free host port. Without it the relay runs on the
// engine's network with its HTTP port 8080 published; the brokers it is
// given must then be reachable from inside that network (a listener the
// Kafka container advertises under a network alias, with
// network.WithNetwork on both containers).
//
// # Topics
//
// Unless WithoutTopicCreation is given, Run first runs the image once as
// "kdelay topic create" with the same settings (idempotent: the delay
// topic with levels x partitions-per-level partitions, the dead-letter
// and cancel topics) and fails with its output if that fails. Target
// topics are the test's to create.
//
// # Settings
//
// The options set the relay's KDELAY_* environment; every other setting
// is testcontainers.WithEnv with its KDELAY_* variable (see the kdelay
// settings in docs/configuration.md). The container gets the image's defaults
// otherwise: the delay topic "delay-topic", the default 18 levels, one
// partition per level, at-least-once delivery.
//
// Ryuk, testcontainers' reaper, is not needed: CleanupContainer removes
// the container at the end of the test (with podman's Docker-compatible
// API, set TESTCONTAINERS_RYUK_DISABLED=true).
package kdelay
