package main

import (
	"log/slog"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kdelay/kdelay/config"
	"github.com/kdelay/kdelay/schedules"
)

// schedulesOptions are the options of a schedules reader for cfg.
func schedulesOptions(cfg config.Config, kopts []kgo.Opt, log *slog.Logger) schedules.Options {
	return schedules.Options{
		KafkaOpts: kopts, Topic: cfg.Topic, Group: cfg.Group, CancelTopic: cfg.CancelTopic,
		Table: cfg.Table(), Horizon: cfg.WheelHorizon, Retain: cfg.MaxDelay, Log: log,
	}
}
