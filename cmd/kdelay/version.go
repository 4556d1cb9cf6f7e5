package main

import (
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/spf13/cobra"
)

func (a *app) newVersionCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version",
		Args:  cobra.NoArgs,
		RunE: a.runE(func(*cobra.Command, []string) error {
			fmt.Fprintf(a.stdout, "kdelay %s\n", version)
			fmt.Fprintf(a.stdout, "go     %s %s/%s\n", runtime.Version(), runtime.GOOS, runtime.GOARCH)
			if bi, ok := debug.ReadBuildInfo(); ok {
				for _, s := range bi.Settings {
					if s.Key == "vcs.revision" {
						fmt.Fprintf(a.stdout, "commit %s\n", s.Value)
					}
				}
			}
			return nil
		}),
	}
}
