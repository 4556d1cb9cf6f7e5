package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/kdelay/kdelay/config"
	"github.com/kdelay/kdelay/schedules"
)

func (a *app) newSchedulesCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "schedules",
		Short: "List, inspect and cancel what is scheduled (read from Kafka, no relay needed)",
		Long: `See what is scheduled, from Kafka alone: each partition of the delay topic
from the relay group's committed offset to its end, minus what the commit
metadata says is already done, minus what the cancel topic cancels. A
cascaded copy is the schedule it continues (its original timestamp, located
"cascaded").

States: waiting (in its level partition, its level time not passed), wheel
(its level time passed, due within the wheel horizon: a relay holds it),
due (due, not yet committed as done), cancelled, done (above the commit,
already forwarded, cascaded or dead-lettered), invalid (breaks the header
contract: dead-lettered next). A record delivered and committed is gone
from the delay topic's pending range and is not shown.`,
		RunE: a.groupRunE,
	}
	cmd.AddCommand(a.newSchedulesListCmd(), a.newSchedulesGetCmd(), a.newSchedulesCancelCmd())
	return cmd
}

// buildIndex reads the delay topic, the group's commits and the cancel
// topic once, to their ends.
func buildIndex(ctx context.Context, cfg config.Config, a *app, id string) (*schedules.Index, error) {
	log := cfg.Logger(a.stderr)
	kopts, err := cfg.KafkaOpts(log)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, adminTimeout)
	defer cancel()
	o := schedulesOptions(cfg, kopts, log)
	o.ID = id
	x, err := schedules.Build(ctx, o)
	if err != nil {
		return nil, brokerErr(err)
	}
	return x, nil
}

func (a *app) newSchedulesListCmd() *cobra.Command {
	var asJSON bool
	params := map[string]*string{}
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List the pending schedules, next due first",
		Long: `List the schedules by due time, next due first: the pending ones (waiting,
wheel, due) unless --state says otherwise. Times are RFC 3339 or epoch
milliseconds.`,
		Example: `  kdelay schedules list
  kdelay schedules list --target orders --due-to 2030-01-01T00:00:00Z
  kdelay schedules list --state all --id order-17 --json`,
		Args: cobra.NoArgs,
		RunE: a.runE(func(cmd *cobra.Command, _ []string) error {
			cfg, err := a.loadClientConfig(cmd)
			if err != nil {
				return err
			}
			f, err := schedules.ParseFilter(func(n string) string { return *params[n] }, cfg.Table().Levels(), 0)
			if err != nil {
				var pe *schedules.ParamError
				if errors.As(err, &pe) {
					return usageErrorf("invalid --%s %q: %s", strings.ReplaceAll(pe.Param, "_", "-"), pe.Value, pe.Reason)
				}
				return usageErrorf("%v", err)
			}
			x, err := buildIndex(cmd.Context(), cfg, a, f.ID)
			if err != nil {
				return err
			}
			now := time.Now()
			ss, next := x.Query(f, now)
			if asJSON {
				if ss == nil {
					ss = []schedules.Schedule{}
				}
				return writeJSON(a.stdout, ss)
			}
			printSchedules(a.stdout, ss, now)
			if next != "" {
				fmt.Fprintf(a.stdout, "more match: raise --limit (%d) or narrow the filters\n", f.Limit)
			}
			return nil
		}),
	}
	fl := cmd.Flags()
	for _, p := range []struct{ name, usage, def string }{
		{schedules.ParamID, "only this kdelay-id", ""},
		{schedules.ParamTarget, "only this target topic", ""},
		{schedules.ParamKey, "only this record key", ""},
		{schedules.ParamLevel, "only this level (1-based)", ""},
		{schedules.ParamDueFrom, "only those due at or after this time", ""},
		{schedules.ParamDueTo, "only those due before this time", ""},
		{schedules.ParamState, "states, comma-separated (waiting, wheel, due, cancelled, done, invalid) or all; default the pending ones", ""},
		{schedules.ParamLimit, "show at most this many (0: all)", "100"},
	} {
		v := new(string)
		params[p.name] = v
		fl.StringVar(v, strings.ReplaceAll(p.name, "_", "-"), p.def, p.usage)
	}
	params[schedules.ParamCursor] = new(string)
	fl.BoolVar(&asJSON, "json", false, "print a JSON array, one object per schedule")
	a.addSetting(fl, findSetting("group"), "")
	a.addSetting(fl, findSetting("wheel-horizon"), "")
	a.addSetting(fl, findSetting("max-delay"), "")
	return cmd
}

func (a *app) newSchedulesGetCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "get ID",
		Short: "Show every record with a kdelay-id above the commits, in its state",
		Long: `Show every record with the kdelay-id ID that lies above the relay group's
commits, in whatever state: pending (waiting, wheel, due), cancelled, done
or invalid. Exit code 1 when there is none: the id was delivered (or
cancelled) and committed, or never scheduled.`,
		Example: `  kdelay schedules get order-17
  kdelay schedules get order-17 --json`,
		Args: cobra.ExactArgs(1),
		RunE: a.runE(func(cmd *cobra.Command, args []string) error {
			cfg, err := a.loadClientConfig(cmd)
			if err != nil {
				return err
			}
			x, err := buildIndex(cmd.Context(), cfg, a, args[0])
			if err != nil {
				return err
			}
			now := time.Now()
			ss := x.Get(args[0], now)
			if asJSON {
				if ss == nil {
					ss = []schedules.Schedule{}
				}
				if err := writeJSON(a.stdout, ss); err != nil {
					return err
				}
			} else if len(ss) > 0 {
				printSchedules(a.stdout, ss, now)
			}
			if len(ss) == 0 {
				return fmt.Errorf("no record with id %s above the commits of group %s: delivered or cancelled and committed, or never scheduled", args[0], cfg.Group)
			}
			return nil
		}),
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print a JSON array")
	a.addSetting(cmd.Flags(), findSetting("group"), "")
	a.addSetting(cmd.Flags(), findSetting("wheel-horizon"), "")
	a.addSetting(cmd.Flags(), findSetting("max-delay"), "")
	return cmd
}

func (a *app) newSchedulesCancelCmd() *cobra.Command {
	var before string
	cmd := &cobra.Command{
		Use:   "cancel ID",
		Short: "Cancel the schedules with a kdelay-id (as kdelay cancel --id)",
		Long: `Write a cancel of ID to the cancel topic and report it once the broker
acknowledged it, with its cut-off: every record with the id whose original
timestamp lies before it is cancelled (now, or --before). See kdelay cancel.`,
		Example: `  kdelay schedules cancel order-17`,
		Args:    cobra.ExactArgs(1),
		RunE: a.runE(func(cmd *cobra.Command, args []string) error {
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
			id := args[0]
			if id == "" || len(id) > 255 {
				return usageErrorf("invalid id: %d bytes, want 1 to 255", len(id))
			}
			cl, err := newClient(cfg, cfg.Logger(a.stderr))
			if err != nil {
				return err
			}
			defer cl.Close()
			ctx, cancel := context.WithTimeout(cmd.Context(), adminTimeout)
			defer cancel()
			ack, err := writeCancel(ctx, cl, cfg, id, at, time.Now(), false)
			if err != nil {
				return err
			}
			fmt.Fprintf(a.stdout, "cancelled id %s: records with original timestamps before %s (%s/%d/%d, acknowledged %s)\n",
				id, fmtTime(ack.Cutoff), ack.Topic, ack.Partition, ack.Offset, fmtTime(ack.AckedAt))
			return nil
		}),
	}
	cmd.Flags().StringVar(&before, "before", "", "cut-off: RFC 3339 or epoch milliseconds; default now")
	return cmd
}

func printSchedules(w io.Writer, ss []schedules.Schedule, now time.Time) {
	if len(ss) == 0 {
		fmt.Fprintln(w, "no schedules match")
		return
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tTARGET\tKEY\tDUE AT\tLEVEL\tPARTITION/OFFSET\tSTATE\tLOCATION")
	for _, s := range ss {
		due := "-"
		if !s.DueAt.IsZero() {
			due = fmtTime(s.DueAt) + " (" + relative(s.DueAt.Sub(now)) + ")"
		}
		state := s.State
		if s.Error != "" {
			state += ": " + s.Error
		}
		if s.Recurring != "" {
			state += " (" + s.Recurring + ")"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\t%s\t%s\n", orDash(s.ID), orDash(s.Target), orDash(printable(s.Key)),
			due, s.Level, fmt.Sprintf("%d/%d", s.Partition, s.Offset), state, s.Location)
	}
	tw.Flush()
	fmt.Fprintf(w, "\n%s\n", plural(len(ss), "schedule"))
}

// printable is s with control and invalid bytes escaped, for a table.
func printable(s string) string {
	q := strconv.Quote(s)
	return q[1 : len(q)-1]
}
