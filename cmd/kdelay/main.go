// Command kdelay gives Apache Kafka delayed delivery.
//
// Producers write to one delay topic and say in headers where each record
// goes and when (kdelay-target plus kdelay-delay, kdelay-deliver-at or
// kdelay-level); "kdelay run", a sidecar next to Kafka, forwards every
// record to its target when it is due. Run "kdelay --help" for the
// subcommands, and docs/cli.md for examples.
//
// Every flag that mirrors a setting reads its KDELAY_* variable for its
// default; a flag given on the command line wins. Exit codes: 0 success,
// 1 failure, 2 usage or configuration error. SIGINT or SIGTERM stops a
// command gracefully; a second one ends the process at once.
package main

import (
	"context"
	"io"
	"os"
	"os/signal"
	"syscall"
)

// version is stamped at build time, e.g. -ldflags "-X main.version=v0.1.0"
// (the Makefile and the release build pass the git tag). Unstamped ("dev"),
// kdelay version reports the module version the Go toolchain recorded, else
// "dev": see buildVersion.
var version = "dev"

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	go func() {
		// The first signal asks for a graceful stop; the second one gets
		// the default action (exit at once), for a shutdown that is stuck.
		<-ctx.Done()
		stop()
	}()
	code := run(ctx, os.Args[1:], nil, os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run executes the command line args and returns the exit code. environ
// holds the KDELAY_* variables (nil: the process environment); ctx ending
// is the signal to stop.
func run(ctx context.Context, args []string, environ map[string]string, stdin io.Reader, stdout, stderr io.Writer) int {
	if environ == nil {
		environ = environMap()
	}
	a := &app{environ: environ, stdin: stdin, stdout: stdout, stderr: stderr}
	return a.execute(ctx, args)
}
