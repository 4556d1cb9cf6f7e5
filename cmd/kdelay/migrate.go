package main

import (
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/kdelay/kdelay/etf1"
)

func (a *app) newMigrateCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "migrate",
		Short: "Move schedules from another scheduler to kdelay",
		Args:  cobra.ArbitraryArgs,
		RunE:  a.groupRunE,
	}
	cmd.AddCommand(a.newMigrateETF1Cmd())
	return cmd
}

func (a *app) newMigrateETF1Cmd() *cobra.Command {
	var (
		from   string
		dryRun bool
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "etf1 --from TOPIC [--dry-run] [--json]",
		Short: "Copy the schedules of an etf1/kafka-message-scheduler topic",
		Long: `Copy the pending schedules of an etf1/kafka-message-scheduler schedules
topic (--from) to the delay topic. The topic is read to its end as of the
start; the latest record of each key wins and a tombstone deletes. Each
live schedule becomes one delay-topic record: kdelay-id = the etf1 key,
target and key from scheduler-target-topic and scheduler-target-key, the
same value and other headers, kdelay-deliver-at = scheduler-epoch x 1000,
in the partition kdelay send would pick. A schedule already due is
delivered at once by the relay.

Running it again is safe: it finds its earlier copies in the delay topic
(kdelay-etf1-source) and copies only what is new; a schedule changed in
etf1 since gets a cancel of its earlier copy, then a new one, and a
schedule deleted since gets a cancel. Schedules it cannot carry (no or bad
scheduler-epoch, no or bad target, a missing target topic, a target
KDELAY_TARGET_ALLOW/DENY refuse, a due time beyond KDELAY_MAX_DELAY, a
kdelay-* header, a key over 255 bytes) are listed with the reason and
left alone. --dry-run prints what it would do and writes nothing.`,
		Example: `  kdelay migrate etf1 --from schedules --dry-run
  kdelay migrate etf1 --from schedules
  kdelay migrate etf1 --from schedules --json | jq .skipped`,
		Args: cobra.NoArgs,
		RunE: a.runE(func(cmd *cobra.Command, _ []string) error {
			cfg, err := a.loadClientConfig(cmd)
			if err != nil {
				return err
			}
			log := cfg.Logger(a.stderr)
			kopts, err := cfg.KafkaOpts(log)
			if err != nil {
				return err
			}
			var skipped []etf1.Action
			o := etf1.Options{
				Source: from, Topic: cfg.Topic, CancelTopic: cfg.CancelTopic, Table: cfg.Table(),
				KafkaOpts: kopts, MaxDelay: cfg.MaxDelay, Allowed: cfg.TargetAllowed, DryRun: dryRun,
				Plan: func(act etf1.Action) {
					if act.Do == etf1.DoSkip {
						skipped = append(skipped, act)
					}
					if dryRun && !asJSON {
						printPlan(a.stdout, act)
					}
				},
			}
			rep, err := etf1.Migrate(cmd.Context(), o)
			if errors.Is(err, etf1.ErrNoTopic) {
				return fmt.Errorf("%w (the delay and cancel topics: create them with `kdelay topic create`)", err)
			}
			if rep.Read == 0 && err != nil {
				return err
			}
			if asJSON {
				if jerr := writeJSON(a.stdout, rep); jerr != nil {
					return jerr
				}
			} else {
				if !dryRun {
					for _, s := range skipped {
						printPlan(a.stdout, s)
					}
				}
				printMigrateReport(a.stdout, rep)
			}
			return err
		}),
	}
	f := cmd.Flags()
	f.StringVar(&from, "from", "", "the etf1 schedules topic (required)")
	f.BoolVar(&dryRun, "dry-run", false, "print what would be copied; write nothing")
	f.BoolVar(&asJSON, "json", false, "print the report as JSON")
	cmd.MarkFlagRequired("from")
	return cmd
}

// printPlan prints one schedule and what is done with it.
func printPlan(w io.Writer, act etf1.Action) {
	switch act.Do {
	case etf1.DoSkip:
		fmt.Fprintf(w, "skip        %s (%s): %s\n", act.ID, act.Source, act.Why)
	case etf1.DoDeleted, etf1.DoCancel:
		fmt.Fprintf(w, "%-11s %s (deleted in etf1)\n", act.Do, act.ID)
	default:
		due := fmtTime(act.Due)
		if act.Overdue {
			due += " (overdue: at once)"
		}
		fmt.Fprintf(w, "%-11s %s -> %s due %s\n", act.Do, act.ID, act.Target, due)
	}
}

func printMigrateReport(w io.Writer, rep etf1.Report) {
	verb := "migrated"
	if rep.DryRun {
		verb = "dry run (nothing written):"
	}
	fmt.Fprintf(w, "%s etf1 schedules from %s to %s: %s read, %s\n", verb, rep.Source, rep.Topic, plural(rep.Read, "record"), plural(rep.Keys, "schedule id"))
	fmt.Fprintf(w, "  live         %d (%d overdue: delivered at once)\n", rep.Live, rep.Overdue)
	fmt.Fprintf(w, "  deleted      %d\n", rep.Deleted)
	fmt.Fprintf(w, "  copied       %d\n", rep.Copied)
	fmt.Fprintf(w, "  rescheduled  %d (changed in etf1 since an earlier run: earlier copy cancelled)\n", rep.Rescheduled)
	fmt.Fprintf(w, "  already      %d (copied by an earlier run)\n", rep.Already)
	fmt.Fprintf(w, "  cancelled    %d (deleted in etf1 since an earlier run)\n", rep.Cancelled)
	var sk []string
	n := 0
	for _, why := range slices.Sorted(maps.Keys(rep.Skipped)) {
		sk = append(sk, fmt.Sprintf("%s %d", why, rep.Skipped[why]))
		n += rep.Skipped[why]
	}
	line := fmt.Sprintf("  skipped      %d", n)
	if n > 0 {
		line += " (" + strings.Join(sk, ", ") + ")"
	}
	fmt.Fprintln(w, line)
	for _, g := range rep.SourceGaps {
		fmt.Fprintf(w, "  note: %s partition %d had nothing readable from offset %d to its end %d (removed by the log cleaner)\n", rep.Source, g.Partition, g.Next, g.End)
	}
	for _, g := range rep.TopicGaps {
		fmt.Fprintf(w, "  note: %s partition %d had nothing readable from offset %d to its end %d (removed by the log cleaner)\n", rep.Topic, g.Partition, g.Next, g.End)
	}
	if rep.Failed > 0 {
		fmt.Fprintf(w, "  failed       %d\n", rep.Failed)
	}
	if !rep.DryRun {
		fmt.Fprintf(w, "  took         %s\n", time.Since(rep.Started).Round(time.Millisecond))
	}
}
