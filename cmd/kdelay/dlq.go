package main

import (
	"errors"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"

	"github.com/kdelay/kdelay/deadletter"
)

func (a *app) newDLQCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "dlq",
		Short: "Inspect and re-drive the records of the dead-letter topic",
		Long: `Inspect and re-drive the dead-letter topic. A dead letter is the delay-topic
record as it was, plus kdelay-error (why) and kdelay-source (where it was
read). Once the cause is fixed (the target topic created, an ACL granted,
KDELAY_MAX_DELAY raised), "kdelay dlq replay" writes the dead letters back to
the delay topic, each at most once.`,
		RunE: a.groupRunE,
	}
	cmd.AddCommand(a.newDLQListCmd(), a.newDLQReplayCmd())
	return cmd
}

func (a *app) newDLQListCmd() *cobra.Command {
	var (
		reason string
		limit  int
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List the dead letters: where they came from, their target and why",
		Long: `List the records of the dead-letter topic from its start: partition, offset,
timestamp, target, source (delay-topic partition/offset) and kdelay-error.
--reason keeps those whose kdelay-error matches a regular expression
(case-insensitive), e.g. --reason 'missing' or --reason 'orders-v2'.`,
		Example: `  kdelay dlq list
  kdelay dlq list --reason "target topic .* missing" --limit 10
  kdelay dlq list --json | jq -r '.[].error' | sort | uniq -c`,
		Args: cobra.NoArgs,
		RunE: a.runE(func(cmd *cobra.Command, _ []string) error {
			filter, err := deadletter.NewReasonFilter(reason)
			if err != nil {
				return usageErrorf("invalid --reason %q: %v", reason, errors.Unwrap(err))
			}
			if limit < 0 {
				return usageErrorf("invalid --limit %d: must be 0 (all) or more", limit)
			}
			cfg, err := a.loadClientConfig(cmd)
			if err != nil {
				return err
			}
			kopts, err := cfg.KafkaOpts(cfg.Logger(a.stderr))
			if err != nil {
				return err
			}
			out, err := deadletter.List(cmd.Context(), kopts, cfg.DLQTopic, filter, "", limit)
			if err != nil {
				return brokerErr(err)
			}
			if asJSON {
				return writeJSON(a.stdout, out)
			}
			printDeadLetters(a.stdout, cfg.DLQTopic, out)
			return nil
		}),
	}
	cmd.Flags().StringVar(&reason, "reason", "", "only dead letters whose kdelay-error matches this regular expression (case-insensitive)")
	cmd.Flags().IntVar(&limit, "limit", 100, "show at most this many (0: all)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print a JSON array")
	return cmd
}

func printDeadLetters(w io.Writer, topic string, ds []deadletter.Letter) {
	if len(ds) == 0 {
		fmt.Fprintf(w, "no dead letters in %s\n", topic)
		return
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "PARTITION\tOFFSET\tTIMESTAMP\tTARGET\tSOURCE\tERROR")
	for _, d := range ds {
		fmt.Fprintf(tw, "%d\t%d\t%s\t%s\t%s\t%s\n", d.Partition, d.Offset, fmtTime(d.Timestamp), orDash(d.Target), orDash(d.Source), d.Error)
	}
	tw.Flush()
	fmt.Fprintf(w, "\n%s\n", plural(len(ds), "dead letter"))
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func (a *app) newDLQReplayCmd() *cobra.Command {
	var (
		reason   string
		group    string
		dryRun   bool
		progress bool
	)
	cmd := &cobra.Command{
		Use:   "replay",
		Short: "Write dead letters back to the delay topic, each at most once",
		Long: `Write the dead letters back to the delay topic, after their cause is fixed,
each at most once. A replayed record is the original delay-topic record
(kdelay-error and kdelay-source removed) with its schedule made absolute
(kdelay-deliver-at = its original due time, as a cascade does), so a record
whose time has passed is delivered at once and one still in the future at
its own time; it goes to the partition of the level of its remaining delay.

What was replayed is remembered as the committed offsets of a consumer
group of the dead-letter topic (--replay-group, default <group>.dlq-replay,
plus ".<reason>" with --reason): a second run goes on from where the last one
stopped and replays nothing twice. The records stay in the dead-letter
topic. A dead letter whose headers still break the contract (it would be
dead-lettered again) is counted and skipped. Each batch is committed once
the delay topic has acknowledged it; a replay killed between the two can
repeat at most that batch.

--reason keeps those whose kdelay-error matches a regular expression
(case-insensitive); the others are not replayed and not remembered by the
group of that --reason.`,
		Example: `  kdelay dlq replay --reason "target topic \"orders\" missing" --dry-run
  kdelay dlq replay --reason orders
  kdelay dlq replay`,
		Args: cobra.NoArgs,
		RunE: a.runE(func(cmd *cobra.Command, _ []string) error {
			filter, err := deadletter.NewReasonFilter(reason)
			if err != nil {
				return usageErrorf("invalid --reason %q: %v", reason, errors.Unwrap(err))
			}
			cfg, err := a.loadClientConfig(cmd)
			if err != nil {
				return err
			}
			if group == "" {
				group = deadletter.ReplayGroup(cfg.Group, reason)
			}
			log := cfg.Logger(a.stderr)
			kopts, err := cfg.KafkaOpts(log)
			if err != nil {
				return err
			}
			r := deadletter.Replayer{KafkaOpts: kopts, Topic: cfg.Topic, DLQTopic: cfg.DLQTopic, Table: cfg.Table(),
				Group: group, Filter: filter, DryRun: dryRun, Log: log}
			if progress || isTerminal(a.stderr) {
				var bar *progressbar.ProgressBar
				r.Progress = func(done, total int64) {
					if bar == nil {
						bar = progressbar.NewOptions64(total, progressbar.OptionSetWriter(a.stderr), progressbar.OptionSetDescription("replaying"),
							progressbar.OptionShowCount(), progressbar.OptionThrottle(100*time.Millisecond))
					}
					bar.Set64(done)
				}
				defer func() {
					if bar != nil {
						bar.Exit()
						fmt.Fprintln(a.stderr)
					}
				}()
			}
			sum, err := r.Run(cmd.Context())
			verb := "replayed"
			if dryRun {
				verb = "would replay"
			}
			fmt.Fprintf(a.stdout, "%s %s from %s to %s (group %s); %d not matching --reason, %d still invalid, skipped\n",
				verb, plural(sum.Replayed, "dead letter"), cfg.DLQTopic, cfg.Topic, group, sum.Unmatched, sum.Invalid)
			if err != nil {
				return brokerErr(err)
			}
			return nil
		}),
	}
	cmd.Flags().StringVar(&reason, "reason", "", "only dead letters whose kdelay-error matches this regular expression (case-insensitive)")
	cmd.Flags().StringVar(&group, "replay-group", "", "consumer group remembering what was replayed (default <group>.dlq-replay[.<reason>])")
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "count what would be replayed; write and commit nothing")
	cmd.Flags().BoolVar(&progress, "progress", false, "show a progress bar on stderr (default: on a terminal)")
	a.addSetting(cmd.Flags(), findSetting("group"), "")
	return cmd
}
