package main

import (
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/kdelay/kdelay/config"
	"github.com/kdelay/kdelay/levels"
)

func (a *app) newLevelsCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "levels",
		Short: "Show the level table: each level's delay and delay-topic partitions",
		Long: `Show the level table. Level i (1-based) owns the delay-topic partitions
[(i-1)*k, i*k), k = partitions per level. A producer writes a record with
delay d to the largest level whose delay is not above d (level 1 if d is
shorter), at a partition of that level chosen by key hash; kdelay send and
levels.Table.Stamp do this for you.`,
		Example: `  kdelay levels
  kdelay levels --levels "1s 2s 4s 8s" --partitions-per-level 2
  kdelay levels --json | jq '.levels[] | {level, partitions}'`,
		Args: cobra.NoArgs,
		RunE: a.runE(func(cmd *cobra.Command, _ []string) error {
			cfg, err := a.loadClientConfig(cmd)
			if err != nil {
				return err
			}
			if asJSON {
				return writeJSON(a.stdout, levelsReport(cfg))
			}
			printLevels(a.stdout, cfg)
			return nil
		}),
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

// levelsJSON is kdelay levels --json.
type levelsJSON struct {
	Topic              string      `json:"topic"`
	PartitionsPerLevel int         `json:"partitions_per_level"`
	Partitions         int32       `json:"partitions"`
	WheelHorizonMs     int64       `json:"wheel_horizon_ms"`
	Levels             []levelJSON `json:"levels"`
}

type levelJSON struct {
	Level      int     `json:"level"`
	Delay      string  `json:"delay"`
	DelayMs    int64   `json:"delay_ms"`
	Partitions []int32 `json:"partitions"`
}

func levelsReport(cfg config.Config) levelsJSON {
	tab := cfg.Table()
	out := levelsJSON{Topic: cfg.Topic, PartitionsPerLevel: tab.PerLevel(), Partitions: tab.Partitions(), WheelHorizonMs: cfg.WheelHorizon.Milliseconds()}
	for l := 1; l <= tab.Levels(); l++ {
		lj := levelJSON{Level: l, Delay: levels.FormatDuration(tab.Duration(l)), DelayMs: tab.Duration(l).Milliseconds()}
		from, to := tab.Range(l)
		for p := from; p < to; p++ {
			lj.Partitions = append(lj.Partitions, p)
		}
		out.Levels = append(out.Levels, lj)
	}
	return out
}

func printLevels(w io.Writer, cfg config.Config) {
	tab := cfg.Table()
	fmt.Fprintf(w, "delay topic %s: %d levels x %d partitions per level = %d partitions; wheel horizon %s\n\n",
		cfg.Topic, tab.Levels(), tab.PerLevel(), tab.Partitions(), levels.FormatDuration(cfg.WheelHorizon))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "LEVEL\tDELAY\tPARTITIONS\tDELAYS IN LEVEL")
	for l := 1; l <= tab.Levels(); l++ {
		from, to := tab.Range(l)
		parts := fmt.Sprint(from)
		if to-from > 1 {
			parts = fmt.Sprintf("%d-%d", from, to-1)
		}
		lo := "0"
		if l > 1 {
			lo = levels.FormatDuration(tab.Duration(l))
		}
		span := fmt.Sprintf("[%s, ∞)", lo)
		if l < tab.Levels() {
			span = fmt.Sprintf("[%s, %s)", lo, levels.FormatDuration(tab.Duration(l+1)))
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\n", l, levels.FormatDuration(tab.Duration(l)), parts, span)
	}
	tw.Flush()
}
