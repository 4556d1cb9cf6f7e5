package kdelay

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/testcontainers/testcontainers-go"
)

// DeliveryMode is the relay's KDELAY_DELIVERY.
type DeliveryMode string

// The delivery modes.
const (
	// AtLeastOnce is the default: duplicates only for the batch in flight
	// at a fault.
	AtLeastOnce DeliveryMode = "at-least-once"
	// ExactlyOnce forwards and commits in one Kafka transaction per batch;
	// consumers reading read_committed see each record once.
	ExactlyOnce DeliveryMode = "exactly-once"
)

// options are what Run's own options set.
type options struct {
	brokers        []string
	topic          string
	group          string
	levels         string
	partitions     int
	delivery       DeliveryMode
	hostNetwork    bool
	createTopics   bool
	startupTimeout time.Duration
}

// env is the relay's KDELAY_* environment for the options that were set.
func (o options) env() map[string]string {
	env := map[string]string{
		"KDELAY_BROKERS": strings.Join(o.brokers, ","),
		"KDELAY_TOPIC":   o.topic,
	}
	if o.group != "" {
		env["KDELAY_GROUP"] = o.group
	}
	if o.levels != "" {
		env["KDELAY_LEVELS"] = o.levels
	}
	if o.partitions > 0 {
		env["KDELAY_PARTITIONS_PER_LEVEL"] = strconv.Itoa(o.partitions)
	}
	if o.delivery != "" {
		env["KDELAY_DELIVERY"] = string(o.delivery)
	}
	return env
}

// Option is an option of Run. It is a testcontainers.ContainerCustomizer
// that changes nothing in the request itself, so it mixes with
// testcontainers' own options in Run's list.
type Option func(*options) error

// Customize implements testcontainers.ContainerCustomizer; Run reads the
// Option itself.
func (Option) Customize(*testcontainers.GenericContainerRequest) error { return nil }

// WithBrokers sets the seed brokers (host:port) the relay connects to
// (KDELAY_BROKERS); required.
func WithBrokers(brokers ...string) Option {
	return func(o *options) error {
		for _, b := range brokers {
			if strings.TrimSpace(b) == "" {
				return errors.New("kdelay: WithBrokers: an empty broker address")
			}
		}
		o.brokers = append(o.brokers, brokers...)
		return nil
	}
}

// WithTopic sets the delay topic (KDELAY_TOPIC); the dead-letter and
// cancel topics are named after it (<topic>.dlq, <topic>.cancel).
// Default DefaultTopic.
func WithTopic(topic string) Option {
	return func(o *options) error {
		if topic == "" {
			return errors.New("kdelay: WithTopic: an empty topic name")
		}
		o.topic = topic
		return nil
	}
}

// WithGroup sets the relays' consumer group (KDELAY_GROUP); default
// "kdelay". Relays of one delay topic share it.
func WithGroup(group string) Option {
	return func(o *options) error { o.group = group; return nil }
}

// WithLevels sets the delay levels, RocketMQ messageDelayLevel style
// ("1s 5s 10s 30s 1m"; KDELAY_LEVELS). Default: the relay's 18 levels,
// 1s to 2h. The relay validates them: a bad table fails Run with its
// message.
func WithLevels(levels string) Option {
	return func(o *options) error {
		if strings.TrimSpace(levels) == "" {
			return errors.New("kdelay: WithLevels: no levels")
		}
		o.levels = levels
		return nil
	}
}

// WithPartitionsPerLevel sets k, the delay topic's partitions per level
// (KDELAY_PARTITIONS_PER_LEVEL); default 1.
func WithPartitionsPerLevel(k int) Option {
	return func(o *options) error {
		if k < 1 {
			return fmt.Errorf("kdelay: WithPartitionsPerLevel(%d): want at least 1", k)
		}
		o.partitions = k
		return nil
	}
}

// WithDeliveryMode sets the delivery mode (KDELAY_DELIVERY); default
// AtLeastOnce.
func WithDeliveryMode(m DeliveryMode) Option {
	return func(o *options) error {
		if m != AtLeastOnce && m != ExactlyOnce {
			return fmt.Errorf("kdelay: WithDeliveryMode(%q): want %q or %q", m, AtLeastOnce, ExactlyOnce)
		}
		o.delivery = m
		return nil
	}
}

// WithHostNetwork runs the relay in the host's network namespace, its HTTP
// server on a free port of 127.0.0.1 (see the package doc's Networking).
func WithHostNetwork() Option {
	return func(o *options) error { o.hostNetwork = true; return nil }
}

// WithoutTopicCreation skips "kdelay topic create": the topics must exist
// (the relay waits KDELAY_MISSING_TOPIC_GRACE, default 30s, for them).
func WithoutTopicCreation() Option {
	return func(o *options) error { o.createTopics = false; return nil }
}

// WithStartupTimeout bounds topic creation plus the wait for /readyz;
// default DefaultStartupTimeout.
func WithStartupTimeout(d time.Duration) Option {
	return func(o *options) error {
		if d <= 0 {
			return fmt.Errorf("kdelay: WithStartupTimeout(%s): want a positive duration", d)
		}
		o.startupTimeout = d
		return nil
	}
}
