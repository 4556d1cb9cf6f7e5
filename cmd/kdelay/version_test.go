package main

import (
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"testing"
)

func TestFormatVersion(t *testing.T) {
	t.Parallel()
	const goLine = "go     go1.26.8 linux/amd64\n"
	info := func(version string, settings ...string) *debug.BuildInfo {
		bi := &debug.BuildInfo{Main: debug.Module{Path: "github.com/kdelay/kdelay", Version: version}}
		for i := 0; i+1 < len(settings); i += 2 {
			bi.Settings = append(bi.Settings, debug.BuildSetting{Key: settings[i], Value: settings[i+1]})
		}
		return bi
	}
	for _, tc := range []struct {
		name    string
		stamped string
		bi      *debug.BuildInfo
		want    string
	}{
		{"stamped tag wins", "v0.1.0", info("v0.0.0-20261204-abc"), "kdelay v0.1.0\n" + goLine},
		{"go install of a tag", "dev", info("v0.1.0"), "kdelay v0.1.0\n" + goLine},
		{"empty stamp is unstamped", "", info("v0.1.0"), "kdelay v0.1.0\n" + goLine},
		{"go build in a checkout", "dev",
			info("v0.1.1-0.20261204205940-ec47ea416fc5+dirty",
				"vcs", "git", "vcs.revision", "ec47ea416fc5fda06487d1ad9ca95f90130f2417",
				"vcs.time", "2026-12-04T20:59:40Z", "vcs.modified", "true"),
			"kdelay v0.1.1-0.20261204205940-ec47ea416fc5+dirty\n" + goLine +
				"commit ec47ea416fc5fda06487d1ad9ca95f90130f2417 2026-12-04T20:59:40Z (modified)\n"},
		{"release build, clean tree", "v0.1.0",
			info("v0.1.0", "vcs.revision", "ec47ea4", "vcs.time", "2026-12-04T20:59:40Z", "vcs.modified", "false"),
			"kdelay v0.1.0\n" + goLine + "commit ec47ea4 2026-12-04T20:59:40Z\n"},
		{"go run", "dev", info("(devel)"), "kdelay dev\n" + goLine},
		{"no build info", "dev", nil, "kdelay dev\n" + goLine},
		{"no module version", "dev", info(""), "kdelay dev\n" + goLine},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := formatVersion(tc.stamped, tc.bi, "go1.26.8 linux/amd64"); got != tc.want {
				t.Errorf("got\n%s\nwant\n%s", got, tc.want)
			}
		})
	}
}

// TestVersionStamp builds the binary as the Makefile and the release build
// do, stamping the version through -ldflags, and runs kdelay version: the
// stamp reaches the output (a renamed variable would be ignored by the
// linker without an error).
func TestVersionStamp(t *testing.T) {
	t.Parallel()
	bin := filepath.Join(t.TempDir(), "kdelay")
	build := exec.CommandContext(t.Context(), "go", "build", "-trimpath", "-buildvcs=false",
		"-ldflags", "-s -w -X main.version=v0.1.0-stamp", "-o", bin, ".")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	for _, args := range [][]string{{"version"}, {"--version"}} {
		out, err := exec.CommandContext(t.Context(), bin, args...).Output()
		if err != nil {
			t.Fatalf("kdelay %v: %v", args, err)
		}
		mustContain(t, "kdelay "+args[0], string(out), "kdelay v0.1.0-stamp\n", "go     go1.")
	}
}
