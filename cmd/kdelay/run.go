package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/trace"
	"golang.org/x/sync/errgroup"

	"github.com/kdelay/kdelay/config"
	"github.com/kdelay/kdelay/relay"
	"github.com/kdelay/kdelay/tracing"
)

// shutdownGrace is added to the configured shutdown timeout before run
// gives up waiting for the components to stop.
const shutdownGrace = 5 * time.Second

func (a *app) newRunCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "run",
		Short: "Run the relay: forward delay-topic records to their targets when due",
		Long: `Run the relay, the kdelay sidecar. It joins the consumer group of the delay
topic and forwards every record to its target topic when it is due.

On start it checks that the delay topic exists with levels x
partitions-per-level partitions and that the dead-letter topic exists, and
refuses to start otherwise (create them with "kdelay topic create"). A
missing topic is looked for again during --missing-topic-grace (default
30s), since a topic created a moment ago may not be in every broker's
metadata yet.

It serves, on --http-addr, /metrics (Prometheus), /healthz (200 while the
process runs) and /readyz (200 once the relay has taken up its first
partition assignment, 503 before that and once shutdown begins).

SIGTERM or SIGINT stops it gracefully within --shutdown-timeout: readiness
off, stop fetching, finish or hand back the batch in flight, commit, leave
the group, stop the HTTP server.`,
		Example: `  KDELAY_BROKERS=kafka:9092 kdelay run
  kdelay run --brokers kafka:9092 --data-dir /data --http-addr :8080`,
		Args: cobra.NoArgs,
		RunE: a.runE(func(cmd *cobra.Command, _ []string) error {
			cfg, err := a.loadConfig(cmd, nil)
			if err != nil {
				return err
			}
			log := cfg.Logger(a.stderr)
			log.Info("kdelay starting", "version", version, "brokers", strings.Join(cfg.Brokers, ","),
				"topic", cfg.Topic, "group", cfg.Group, "levels", cfg.Table().String(),
				"partitions", cfg.Table().Partitions(), "data_dir", cfg.DataDir)
			sc, err := newSidecar(cfg, log)
			if err != nil {
				return err
			}
			tp, err := tracing.FromEnv(cmd.Context(), a.environ, version)
			if err != nil {
				return err
			}
			if tp != nil {
				sc.tp = tp
				log.Info("tracing: a span per forwarded record, exported over OTLP/HTTP (OTEL_* variables)")
				defer func() {
					ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
					defer cancel()
					if err := tp.Shutdown(ctx); err != nil {
						log.Warn("tracing: the last spans were not exported", "err", err)
					}
				}()
			}
			return runBounded(cmd.Context(), cfg.ShutdownTimeout+shutdownGrace, sc.Run)
		}),
	}
	a.addSettings(cmd.Flags(), relaySettings)
	return cmd
}

// waitForTopics checks the topics before the relay starts. While the
// brokers cannot be reached it logs and retries with backoff (the process
// stays up, /healthz 200 and /readyz 503), so a relay started before Kafka,
// or while Kafka is down, waits instead of crash-looping. A missing or
// mis-sized topic is an error at once: waiting would not fix it.
//
// A missing topic may be one created a moment ago that this broker's
// metadata does not show yet: it is looked for again every 250ms for
// cfg.MissingTopicGrace before the error.
func waitForTopics(ctx context.Context, cfg config.Config, log *slog.Logger) error {
	backoff := time.Second
	graceEnd := time.Now().Add(cfg.MissingTopicGrace)
	for {
		err := checkTopicsWith(ctx, cfg, log)
		var le *layoutError
		if errors.As(err, &le) && le.missing && time.Now().Before(graceEnd) && ctx.Err() == nil {
			log.Info("topic not found; looking again in case it was just created", "err", err, "grace_left", time.Until(graceEnd).Round(time.Second).String())
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(250 * time.Millisecond):
			}
			continue
		}
		if err == nil || errors.As(err, &le) || ctx.Err() != nil {
			return err
		}
		log.Warn("cannot check the delay topic; retrying", "err", err, "retry_in", backoff.String())
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 30*time.Second)
	}
}

// checkTopicsWith runs checkTopics with a short-lived admin client.
func checkTopicsWith(ctx context.Context, cfg config.Config, log *slog.Logger) error {
	cl, err := newClient(cfg, log)
	if err != nil {
		return err
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(ctx, adminTimeout)
	defer cancel()
	return checkTopics(ctx, kadm.NewClient(cl), cfg)
}

// runBounded runs fn until it returns; once ctx ends, it waits at most
// grace more and then gives up with an error (main exits; the process
// does not hang on a stuck shutdown).
func runBounded(ctx context.Context, grace time.Duration, fn func(context.Context) error) error {
	done := make(chan error, 1)
	go func() { done <- fn(ctx) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
	}
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case err := <-done:
		return err
	case <-t.C:
		return fmt.Errorf("shutdown did not finish within %s", grace)
	}
}

// sidecar is the relay with its HTTP endpoints, sharing one private
// Prometheus registry.
type sidecar struct {
	cfg      config.Config
	log      *slog.Logger
	relay    atomic.Pointer[relay.Relay] // set once Kafka answers and the relay is created
	kopts    []kgo.Opt
	tp       trace.TracerProvider // nil: no tracing
	reg      *prometheus.Registry
	http     *httpServer // nil when KDELAY_HTTP_ADDR=off
	stopping atomic.Bool
}

// newSidecar binds the HTTP server, unless disabled; Run creates the relay
// once Kafka answers. kopts are extra client options for the relay.
func newSidecar(cfg config.Config, log *slog.Logger, kopts ...kgo.Opt) (*sidecar, error) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	s := &sidecar{cfg: cfg, log: log, reg: reg, kopts: kopts}
	if !strings.EqualFold(cfg.HTTPAddr, "off") {
		// First, so a busy port fails before the relay opens anything.
		h, err := newHTTPServer(cfg.HTTPAddr, reg, s.ready, s.live, log)
		if err != nil {
			return nil, err
		}
		s.http = h
	}
	return s, nil
}

func (s *sidecar) ready() (bool, string) {
	r := s.relay.Load()
	switch {
	case s.stopping.Load():
		return false, "shutting down"
	case r == nil:
		return false, "waiting for Kafka and the topics"
	case !r.Ready():
		if why := r.Why(); why != "" {
			return false, "relay " + why
		}
		return false, "relay joining the group or waiting for its first assignment"
	}
	return true, ""
}

// live is /healthz: an error when the relay is stalled.
func (s *sidecar) live() error {
	if r := s.relay.Load(); r != nil {
		return r.Live()
	}
	return nil
}

// Run runs the relay and the HTTP server until ctx ends, then stops them
// in order: readiness off, the relay (stop fetching, finish or hand back
// what is in flight, commit, leave the group), the HTTP server. Either
// component failing stops the other.
func (s *sidecar) Run(ctx context.Context) error {
	g, gctx := errgroup.WithContext(ctx)
	relayDone := make(chan struct{})
	var stopAt atomic.Int64
	g.Go(func() error {
		<-gctx.Done()
		stopAt.Store(time.Now().UnixNano())
		s.stopping.Store(true)
		s.log.Info("shutting down", "timeout", s.cfg.ShutdownTimeout.String())
		return nil
	})
	g.Go(func() error {
		defer close(relayDone)
		if err := waitForTopics(gctx, s.cfg, s.log); err != nil || gctx.Err() != nil {
			return err
		}
		r, err := relay.New(relay.Options{Config: s.cfg, Log: s.log, Registry: s.reg, KafkaOpts: s.kopts, OnIdle: debug.FreeOSMemory, TracerProvider: s.tp})
		if err != nil {
			return err
		}
		s.relay.Store(r)
		err = r.Run(gctx)
		switch {
		case err != nil:
			return fmt.Errorf("relay: %w", err)
		case gctx.Err() == nil:
			return errors.New("relay stopped on its own")
		}
		attrs := []any{}
		if at := stopAt.Load(); at != 0 {
			attrs = append(attrs, "shutdown_took", time.Since(time.Unix(0, at)).Round(time.Millisecond).String())
		}
		s.log.Info("relay stopped", attrs...)
		return nil
	})
	if s.http != nil {
		g.Go(s.http.Serve)
		g.Go(func() error {
			<-relayDone
			return s.http.Shutdown(shutdownGrace)
		})
	}
	return g.Wait()
}
