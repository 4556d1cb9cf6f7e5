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
	return &cobra.Command{
		Use:   "levels",
		Short: "Show the level table: each level's delay and delay-topic partitions",
		Long: `Show the level table. Level i (1-based) owns the delay-topic partitions
[(i-1)*k, i*k), k = partitions per level. A producer writes a record with
delay d to the largest level whose delay is not above d (level 1 if d is
shorter), at a partition of that level chosen by key hash; kdelay send and
levels.Table.Stamp do this for you.`,
		Example: `  kdelay levels
  kdelay levels --levels "1s 2s 4s 8s" --partitions-per-level 2`,
		Args: cobra.NoArgs,
		RunE: a.runE(func(cmd *cobra.Command, _ []string) error {
			cfg, err := a.loadConfig(cmd, nil)
			if err != nil {
				return err
			}
			printLevels(a.stdout, cfg)
			return nil
		}),
	}
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
