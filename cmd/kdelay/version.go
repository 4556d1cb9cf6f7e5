package main

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"strings"

	"github.com/spf13/cobra"
)

func (a *app) newVersionCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version",
		Args:  cobra.NoArgs,
		RunE: a.runE(func(*cobra.Command, []string) error {
			fmt.Fprint(a.stdout, versionText())
			return nil
		}),
	}
}

// versionText is what kdelay version and kdelay --version print: the
// version, the Go toolchain and platform, and the commit when the build
// recorded one.
func versionText() string {
	var b strings.Builder
	fmt.Fprintf(&b, "kdelay %s\n", version)
	fmt.Fprintf(&b, "go     %s %s/%s\n", runtime.Version(), runtime.GOOS, runtime.GOARCH)
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" {
				fmt.Fprintf(&b, "commit %s\n", s.Value)
			}
		}
	}
	return b.String()
}
