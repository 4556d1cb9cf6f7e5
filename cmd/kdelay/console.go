package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"reflect"
	"runtime/debug"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/sync/errgroup"

	"github.com/kdelay/kdelay/config"
	"github.com/kdelay/kdelay/console"
	"github.com/kdelay/kdelay/schedules"
)

func (a *app) newConsoleCmd() *cobra.Command {
	var addr string
	def := envDefaultOf[config.Console]("CONSOLE_ADDR")
	if v := a.environ[config.Prefix+"CONSOLE_ADDR"]; v != "" {
		def = v
	}
	cmd := &cobra.Command{
		Use:   "console",
		Short: "Serve the schedules' JSON API and web page (stateless, reads Kafka)",
		Long: `Serve a JSON API and a web page over what is scheduled: the pending
schedules with filters, what comes due when, the levels' progress and the
relays in the group, the dead letters. The console keeps an index of the
pending schedules, built at start and kept current by reading the delay
topic, the group's commits and the cancel topic; it holds no other state,
so any number may run, anywhere that reaches the brokers.

Writes (cancel, schedule, dead-letter replay) need KDELAY_CONSOLE_TOKEN as a
bearer token and are refused without one; reads are open unless
KDELAY_CONSOLE_AUTH=all. The default address is loopback only. See
docs/console.md for the API.`,
		Example: `  kdelay console
  KDELAY_CONSOLE_TOKEN=$(cat token) kdelay console --addr :8081`,
		Args: cobra.NoArgs,
		RunE: a.runE(func(cmd *cobra.Command, _ []string) error {
			cfg, err := a.loadConfig(cmd, nil)
			if err != nil {
				return err
			}
			env := map[string]string{}
			for k, v := range a.environ {
				env[k] = v
			}
			env[config.Prefix+"CONSOLE_ADDR"] = addr
			cc, err := config.LoadConsole(env)
			if err != nil {
				msg := strings.ReplaceAll(err.Error(), config.Prefix+"CONSOLE_ADDR=", "--addr=")
				return usageErrorf("invalid configuration:\n  %s", strings.ReplaceAll(msg, "\n", "\n  "))
			}
			return a.serveConsole(cmd.Context(), cfg, cc)
		}),
	}
	cmd.Flags().StringVar(&addr, "addr", def, "address of the API and web page, [host]:port (env KDELAY_CONSOLE_ADDR)")
	a.addSetting(cmd.Flags(), findSetting("group"), "")
	a.addSetting(cmd.Flags(), findSetting("wheel-horizon"), "")
	a.addSetting(cmd.Flags(), findSetting("max-delay"), "")
	a.addSetting(cmd.Flags(), findSetting("target-allow"), "")
	a.addSetting(cmd.Flags(), findSetting("target-deny"), "")
	a.addSetting(cmd.Flags(), findSetting("shutdown-timeout"), "")
	return cmd
}

// consoleGCPercent is the console's garbage-collection target (GOGC) when
// neither GOGC nor GOMEMLIMIT is set: its heap is mostly the index, which
// holds no pointers, so collecting more often costs little CPU and keeps
// the heap within about 1.5 times what is live instead of 2.
const consoleGCPercent = 50

func (a *app) serveConsole(ctx context.Context, cfg config.Config, cc config.Console) error {
	log := cfg.Logger(a.stderr)
	if a.environ["GOGC"] == "" && a.environ["GOMEMLIMIT"] == "" {
		debug.SetGCPercent(consoleGCPercent)
	}
	kopts, err := cfg.KafkaOpts(log)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", cc.Addr)
	if err != nil {
		return fmt.Errorf("console: listen on %s (--addr, KDELAY_CONSOLE_ADDR): %w", cc.Addr, err)
	}
	f, err := schedules.NewFollower(schedulesOptions(cfg, kopts, log))
	if err != nil {
		ln.Close()
		return err
	}
	defer f.Close()
	srv, err := console.New(console.Options{Index: f, Config: cfg, KafkaOpts: kopts, Token: cc.Token,
		AuthAll: cc.Auth == config.ConsoleAuthAll, Log: log})
	if err != nil {
		ln.Close()
		return err
	}
	defer srv.Close()
	hs := &http.Server{Handler: srv, ReadHeaderTimeout: 10 * time.Second}
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return f.Run(gctx) })
	g.Go(func() error {
		if err := hs.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			return fmt.Errorf("console: %w", err)
		}
		return nil
	})
	g.Go(func() error {
		<-gctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), cfg.ShutdownTimeout)
		defer cancel()
		if err := hs.Shutdown(sctx); err != nil {
			hs.Close()
		}
		return nil
	})
	writes := "writes need the bearer token"
	if cc.Token == "" {
		writes = "writes disabled (no KDELAY_CONSOLE_TOKEN)"
	}
	log.Info("console listening", "addr", ln.Addr().String(), "url", "http://"+ln.Addr().String()+"/", "auth", cc.Auth, "writes", writes)
	go func() {
		select {
		case <-f.Ready():
			log.Info("console index complete", "records", f.Index().Len())
		case <-gctx.Done():
		}
	}()
	return g.Wait()
}

// envDefaultOf returns the envDefault tag of the field of T read from
// KDELAY_<name>.
func envDefaultOf[T any](name string) string {
	t := reflect.TypeFor[T]()
	for i := range t.NumField() {
		if tag, _, _ := strings.Cut(t.Field(i).Tag.Get("env"), ","); tag == name {
			return t.Field(i).Tag.Get("envDefault")
		}
	}
	return ""
}
