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

// versionText is what kdelay version and kdelay --version print for this
// binary: see formatVersion.
func versionText() string {
	bi, _ := debug.ReadBuildInfo()
	return formatVersion(version, bi, runtime.Version()+" "+runtime.GOOS+"/"+runtime.GOARCH)
}

// buildVersion is the version this binary reports: stamped, when the build
// set main.version (a release build passes the git tag, e.g. v0.1.0);
// else the main module's version the Go toolchain recorded (the tag or a
// pseudo-version of the commit for "go install ...@v0.1.0" or a go build in
// a git checkout, with "+dirty" for uncommitted changes); else "dev"
// (go run, go test, or a build with -buildvcs=false and no stamp). bi may
// be nil.
func buildVersion(stamped string, bi *debug.BuildInfo) string {
	if stamped != "" && stamped != "dev" {
		return stamped
	}
	if bi != nil && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		return bi.Main.Version
	}
	return "dev"
}

// formatVersion renders the version lines: "kdelay <version>", the Go
// toolchain and platform (goPlatform), and, when the build recorded the
// git commit, "commit <hash>" with its time and "(modified)" for a build
// from a working tree with uncommitted changes.
func formatVersion(stamped string, bi *debug.BuildInfo, goPlatform string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "kdelay %s\n", buildVersion(stamped, bi))
	fmt.Fprintf(&b, "go     %s\n", goPlatform)
	if bi == nil {
		return b.String()
	}
	var rev, at string
	var modified bool
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.time":
			at = s.Value
		case "vcs.modified":
			modified = s.Value == "true"
		}
	}
	if rev == "" {
		return b.String()
	}
	fmt.Fprintf(&b, "commit %s", rev)
	if at != "" {
		fmt.Fprintf(&b, " %s", at)
	}
	if modified {
		b.WriteString(" (modified)")
	}
	b.WriteString("\n")
	return b.String()
}
