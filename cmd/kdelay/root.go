package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"
	"golang.org/x/term"
)

// Exit codes.
const (
	exitOK      = 0
	exitFailure = 1
	exitUsage   = 2
)

// app is one execution of the command line: its environment and streams.
type app struct {
	environ map[string]string
	stdin   io.Reader
	stdout  io.Writer
	stderr  io.Writer

	ran bool // a command's RunE started: its errors are failures, not usage errors
}

// usageError is a bad command line or configuration: exit code 2.
type usageError struct{ err error }

func (e *usageError) Error() string { return e.err.Error() }
func (e *usageError) Unwrap() error { return e.err }

func usageErrorf(format string, args ...any) error {
	return &usageError{fmt.Errorf(format, args...)}
}

// execute runs the command line and maps its outcome to an exit code.
func (a *app) execute(ctx context.Context, args []string) int {
	root := a.newRoot()
	root.SetArgs(args)
	cmd, err := root.ExecuteContextC(ctx)
	if err == nil {
		return exitOK
	}
	fmt.Fprintf(a.stderr, "kdelay: %v\n", err)
	var ue *usageError
	if errors.As(err, &ue) || !a.ran {
		// Errors before a command ran come from cobra: unknown command or
		// flag, bad flag value, missing required flag, wrong arguments.
		if !errors.As(err, &ue) {
			fmt.Fprintf(a.stderr, "Run '%s --help' for usage.\n", cmd.CommandPath())
		}
		return exitUsage
	}
	return exitFailure
}

func (a *app) newRoot() *cobra.Command {
	root := &cobra.Command{
		Use:   "kdelay",
		Short: "Delayed delivery for Apache Kafka",
		Long: `kdelay gives Apache Kafka delayed delivery. Producers write to one delay
topic with headers saying where each record goes (kdelay-target) and when
(kdelay-delay, kdelay-deliver-at or kdelay-level); the relay, "kdelay run",
forwards every record to its target when it is due.

Every flag that mirrors a setting reads its KDELAY_* variable for its
default; a flag given on the command line wins.

Exit codes: 0 success, 1 failure, 2 usage or configuration error.`,
		Version:       version,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	// kdelay --version prints what kdelay version prints.
	root.SetVersionTemplate(versionText())
	root.SetIn(a.stdin)
	root.SetOut(a.stdout)
	root.SetErr(a.stderr)
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return &usageError{err} })
	a.addSettings(root.PersistentFlags(), commonSettings)
	root.AddCommand(
		a.newRunCmd(),
		a.newDevCmd(),
		a.newSendCmd(),
		a.newCancelCmd(),
		a.newSchedulesCmd(),
		a.newConsoleCmd(),
		a.newTopicCmd(),
		a.newStatusCmd(),
		a.newLevelsCmd(),
		a.newDLQCmd(),
		a.newMigrateCmd(),
		a.newVersionCmd(),
	)
	return root
}

// groupRunE is the RunE of a command that only groups subcommands (topic,
// dlq): alone it prints its help (exit 0); with an argument that names no
// subcommand it is a usage error (exit 2), as an unknown command of the
// root is.
func (a *app) groupRunE(cmd *cobra.Command, args []string) error {
	if len(args) == 0 {
		return cmd.Help()
	}
	err := fmt.Errorf("unknown command %q for %q", args[0], cmd.CommandPath())
	if s := cmd.SuggestionsFor(args[0]); len(s) > 0 {
		err = fmt.Errorf("%w\n\nDid you mean this?\n\t%s", err, strings.Join(s, "\n\t"))
	}
	return err // not a usageError: execute adds the "--help" hint, exit 2
}

// runE wraps a command body so that its errors count as failures (exit 1)
// unless they are usage errors.
func (a *app) runE(fn func(cmd *cobra.Command, args []string) error) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, args []string) error {
		a.ran = true
		return fn(cmd, args)
	}
}

// isTerminal reports whether w is a terminal.
func isTerminal(w any) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}
