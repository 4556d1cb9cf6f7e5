package main

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kdelay/kdelay/cancel"
	"github.com/kdelay/kdelay/config"
	"github.com/kdelay/kdelay/levels"
)

func (a *app) newCancelCmd() *cobra.Command {
	var (
		id       string
		before   string
		withdraw bool
	)
	cmd := &cobra.Command{
		Use:   "cancel --id ID [--before TIME]",
		Short: "Cancel the delayed records with a kdelay-id",
		Long: `Write a cancel to the cancel topic (KDELAY_CANCEL_TOPIC, default
<topic>.cancel): a record keyed by the id. It cancels every delayed record
with that kdelay-id whose original timestamp lies before the cut-off: now
(the cancel's own timestamp), or --before (RFC 3339 or epoch milliseconds,
sent as the kdelay-cancel-before header).

A cancel the broker acknowledged at least KDELAY_CANCEL_MARGIN (100ms)
before a record's due time is always honoured; a later one is best effort.
A cancel of a record already delivered does nothing.

--withdraw writes a tombstone instead: the id's cancel is withdrawn, records
with the id not yet due are delivered again.`,
		Example: `  kdelay cancel --id order-42
  kdelay cancel --id order-42 --before 2030-01-01T00:00:00Z
  kdelay cancel --id order-42 --withdraw`,
		Args: cobra.NoArgs,
		RunE: a.runE(func(cmd *cobra.Command, _ []string) error {
			cfg, err := a.loadClientConfig(cmd)
			if err != nil {
				return err
			}
			var at time.Time
			if before != "" {
				if at, err = parseAt(before); err != nil {
					return usageErrorf("invalid --before %q: want RFC 3339 (2030-01-01T00:00:00Z) or epoch milliseconds", before)
				}
			}
			now := time.Now()
			if _, err := levels.Cancel(cfg.CancelTopic, id, at, now); err != nil {
				return usageErrorf("%v", err)
			}
			log := cfg.Logger(a.stderr)
			cl, err := newClient(cfg, log)
			if err != nil {
				return err
			}
			defer cl.Close()
			ctx, cancel := context.WithTimeout(cmd.Context(), adminTimeout)
			defer cancel()
			ack, err := writeCancel(ctx, cl, cfg, id, at, now, withdraw)
			if err != nil {
				return err
			}
			switch {
			case withdraw:
				fmt.Fprintf(a.stdout, "withdrew the cancel of id %s (%s/%d/%d)\n", id, ack.Topic, ack.Partition, ack.Offset)
			default:
				fmt.Fprintf(a.stdout, "cancelled id %s: records with timestamps before %s (%s/%d/%d, acknowledged %s)\n",
					id, fmtTime(ack.Cutoff), ack.Topic, ack.Partition, ack.Offset, fmtTime(ack.AckedAt))
			}
			return nil
		}),
	}
	f := cmd.Flags()
	f.StringVar(&id, "id", "", "the kdelay-id to cancel, 1-255 bytes (required)")
	f.StringVar(&before, "before", "", "cut-off: RFC 3339 or epoch milliseconds; default now")
	f.BoolVar(&withdraw, "withdraw", false, "withdraw the id's cancel (a tombstone)")
	cmd.MarkFlagRequired("id")
	cmd.MarkFlagsMutuallyExclusive("before", "withdraw")
	return cmd
}

// writeCancel checks that the cancel topic exists and writes the cancel
// (or, with withdraw, the tombstone) of id, returning once the broker
// acknowledged it.
func writeCancel(ctx context.Context, cl *kgo.Client, cfg config.Config, id string, before, now time.Time, withdraw bool) (cancel.Ack, error) {
	if _, ok, err := partitionCount(ctx, kadm.NewClient(cl), cfg.CancelTopic); err != nil {
		return cancel.Ack{}, err
	} else if !ok {
		return cancel.Ack{}, fmt.Errorf("cancel topic %s does not exist; create it with `kdelay topic create`", cfg.CancelTopic)
	}
	var (
		ack cancel.Ack
		err error
	)
	if withdraw {
		ack, err = cancel.Withdraw(ctx, cl, cfg.CancelTopic, id, now)
	} else {
		ack, err = cancel.Write(ctx, cl, cfg.CancelTopic, id, before, now)
	}
	if err != nil {
		return ack, brokerErr(err)
	}
	return ack, nil
}

// countCancels reads the cancel topic through and returns the number of
// live cancels a relay would hold.
func countCancels(ctx context.Context, cfg config.Config, log *slog.Logger) (int, error) {
	kopts, err := cfg.KafkaOpts(log)
	if err != nil {
		return 0, err
	}
	rd, err := cancel.NewReader(cancel.Options{Topic: cfg.CancelTopic, KafkaOpts: kopts, Retain: cfg.MaxDelay, Log: log})
	if err != nil {
		return 0, err
	}
	defer rd.Close()
	if err := rd.Sync(ctx); err != nil {
		return 0, err
	}
	return rd.Set().Len(), nil
}
