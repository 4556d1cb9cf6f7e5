//go:build example

// A user's test with kdelay and testcontainers' Kafka module, quoted in
// docs/containers.md. It pulls Kafka from a registry, so it builds only
// with -tags example (CI vets it; TestDocExample keeps the quote
// identical).

package kdelay_test

import (
	"context"
	"testing"
	"time"

	"github.com/testcontainers/testcontainers-go"
	"github.com/testcontainers/testcontainers-go/modules/kafka"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kdelay/kdelay/testcontainers/kdelay"
)

func TestDelayedOrder(t *testing.T) {
	ctx := context.Background()

	kafkaC, err := kafka.Run(ctx, "confluentinc/confluent-local:7.5.0")
	testcontainers.CleanupContainer(t, kafkaC)
	if err != nil {
		t.Fatal(err)
	}
	brokers, err := kafkaC.Brokers(ctx) // localhost:<mapped port>
	if err != nil {
		t.Fatal(err)
	}

	// Creates the delay topic "delay-topic" (3 levels, 3 partitions) and
	// its .dlq and .cancel topics, then returns once /readyz answers.
	relay, err := kdelay.Run(ctx, "kdelay:0.1.0",
		kdelay.WithBrokers(brokers...),
		kdelay.WithHostNetwork(), // the relay reaches localhost:<mapped port>
		kdelay.WithLevels("1s 5s 30s"),
	)
	testcontainers.CleanupContainer(t, relay)
	if err != nil {
		t.Fatal(err)
	}

	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...),
		kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.ConsumeTopics("orders"))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if _, err := kadm.NewClient(cl).CreateTopic(ctx, 1, 1, nil, "orders"); err != nil {
		t.Fatal(err)
	}

	// Deliver to "orders" 5 s from now. Level 2 (5s) owns partition 1 of
	// the delay topic: a record goes to the largest level not above its
	// delay (kdelay's producer helpers choose it for you).
	sent := time.Now()
	rec := &kgo.Record{
		Topic:     relay.Topic(),
		Partition: 1,
		Key:       []byte("order-42"),
		Value:     []byte(`{"id":42}`),
		Headers: []kgo.RecordHeader{
			{Key: "kdelay-target", Value: []byte("orders")},
			{Key: "kdelay-delay", Value: []byte("5s")},
		},
	}
	if err := cl.ProduceSync(ctx, rec).FirstErr(); err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	fs := cl.PollFetches(ctx)
	if err := fs.Err0(); err != nil {
		t.Fatal(err)
	}
	got := fs.Records()[0]
	if waited := time.Since(sent); string(got.Key) != "order-42" || waited < 5*time.Second {
		t.Fatalf("got %q after %s, want order-42 after 5s", got.Key, waited)
	}
}
