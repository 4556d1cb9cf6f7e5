package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"golang.org/x/sync/errgroup"

	"github.com/kdelay/kdelay/config"
	"github.com/kdelay/kdelay/levels"
)

const (
	// demoTopic is the target topic of the demo records.
	demoTopic = "demo"
	// demoHeader carries a demo record's planned delay (the producer's own
	// headers pass through to the target).
	demoHeader = "demo-delay"
)

func (a *app) newDevCmd() *cobra.Command {
	var (
		port int
		demo bool
	)
	cmd := &cobra.Command{
		Use:   "dev",
		Short: "Try kdelay locally: an in-process Kafka, the relay and demo records",
		Long: `Start an in-process Kafka broker (franz-go's kfake) on 127.0.0.1:--port,
create the delay topic, the dead-letter topic and a demo target topic
("demo"), run the relay with a temporary data directory, send demo records
across levels and arbitrary delays, and print each delivery to "demo" as it
arrives: key, planned delay, due time and lateness (arrival minus the
kdelay-due-at header).

The broker address comes first, with kcat commands to send your own records.
Everything lives in memory and goes away on Ctrl-C. Logs go to stderr, at
level warn unless --log-level or KDELAY_LOG_LEVEL says otherwise.

Scale the levels down to see a whole cascade in seconds:
--levels "1s 2s 4s 8s", or even "100ms 200ms 400ms 800ms".`,
		Example: `  kdelay dev
  kdelay dev --port 0 --levels "1s 2s 4s 8s"
  kdelay dev --demo=false --http-addr :8080`,
		Args: cobra.NoArgs,
		RunE: a.runE(func(cmd *cobra.Command, _ []string) error {
			return a.dev(cmd, port, demo)
		}),
	}
	cmd.Flags().IntVar(&port, "port", 9092, "broker port on 127.0.0.1; 0 picks a free one")
	cmd.Flags().BoolVar(&demo, "demo", true, "send the demo records")
	for _, s := range relaySettings {
		switch s.flag {
		case "http-addr":
			a.addSetting(cmd.Flags(), s, "off")
		case "shutdown-timeout":
			// Nothing to keep: a stuck stop should not take 30s.
			a.addSetting(cmd.Flags(), s, "5s")
		case "group", "max-delay", "wheel-horizon", "fetch-max-wait":
			a.addSetting(cmd.Flags(), s, "")
		}
	}
	return cmd
}

// syncWriter serialises writes from the goroutines of dev.
type syncWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (s *syncWriter) Printf(format string, args ...any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	fmt.Fprintf(s.w, format, args...)
}

func (a *app) dev(cmd *cobra.Command, port int, demo bool) error {
	if port < 0 || port > 65535 {
		return usageErrorf("invalid --port %d: want 0..65535", port)
	}
	dir, err := os.MkdirTemp("", "kdelay-dev-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	overrides := map[string]string{config.Prefix + "DATA_DIR": dir}
	if _, set := a.environ[config.Prefix+"LOG_LEVEL"]; !set && !cmd.Flags().Changed("log-level") {
		// The deliveries on stdout are the show; only problems on stderr.
		overrides[config.Prefix+"LOG_LEVEL"] = "warn"
	}
	cfg, err := a.loadConfig(cmd, overrides)
	if err != nil {
		return err
	}
	log := cfg.Logger(a.stderr)
	out := &syncWriter{w: a.stdout}
	ctx := cmd.Context()

	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.Ports(port))
	if err != nil {
		if errors.Is(err, syscall.EADDRINUSE) {
			return fmt.Errorf("port %d is busy (is a Kafka broker already running?); pick another with --port N, or --port 0 for a free one", port)
		}
		return fmt.Errorf("start in-process Kafka: %w", err)
	}
	defer cluster.Close()
	cfg.Brokers = cluster.ListenAddrs()
	addr := cfg.Brokers[0]

	if err := devTopics(ctx, cfg, log); err != nil {
		return err
	}
	printDevIntro(out, cfg, addr)

	sc, err := newSidecar(cfg, log)
	if err != nil {
		return err
	}
	start := time.Now()
	return runBounded(ctx, cfg.ShutdownTimeout+shutdownGrace, func(ctx context.Context) error {
		g, gctx := errgroup.WithContext(ctx)
		g.Go(func() error { return sc.Run(gctx) })
		g.Go(func() error { return watchDeliveries(gctx, cfg, log, out, start) })
		if demo {
			g.Go(func() error { return sendDemo(gctx, cfg, log, out) })
		}
		g.Go(func() error {
			<-gctx.Done()
			if ctx.Err() != nil {
				out.Printf("stopping (at most %s; Ctrl-C again quits at once)\n", cfg.ShutdownTimeout)
			}
			return nil
		})
		err := g.Wait()
		if err == nil {
			out.Printf("stopped\n")
		}
		return err
	})
}

// devTopics creates the delay, dead-letter and demo topics.
func devTopics(ctx context.Context, cfg config.Config, log *slog.Logger) error {
	cl, err := newClient(cfg, log, waitOpts...)
	if err != nil {
		return err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	ctx, cancel := context.WithTimeout(ctx, adminTimeout)
	defer cancel()
	res, _, err := ensureTopics(ctx, adm, cfg, topicSpec{rf: -1, dlqPartitions: 1})
	if err != nil {
		return err
	}
	if err := waitVisible(ctx, adm, res.created, adminTimeout); err != nil {
		return err
	}
	if _, err := adm.CreateTopic(ctx, 3, -1, nil, demoTopic); err != nil {
		return fmt.Errorf("create topic %s: %w", demoTopic, err)
	}
	return nil
}

func printDevIntro(out *syncWriter, cfg config.Config, addr string) {
	tab := cfg.Table()
	out.Printf("kdelay dev: in-process Kafka (kfake) listening on %s\n\n", addr)
	out.Printf("  delay topic        %s (%d partitions: %d levels x %d)\n", cfg.Topic, tab.Partitions(), tab.Levels(), tab.PerLevel())
	out.Printf("  levels             %s\n", tab.String())
	out.Printf("  dead-letter topic  %s\n", cfg.DLQTopic)
	out.Printf("  demo target        %s (3 partitions)\n\n", demoTopic)
	ex := tab.Duration(min(3, tab.Levels()))
	p, _ := tab.Range(tab.LevelFor(ex))
	out.Printf("Send your own (with kcat; -p is the level's partition, see kdelay levels):\n")
	out.Printf("  echo hello | kcat -P -b %s -t %s -p %d -k my-key -H kdelay-target=%s -H kdelay-delay=%s\n",
		addr, cfg.Topic, p, demoTopic, levels.FormatDuration(ex))
	flags := ""
	if tab.String() != levels.Default().String() {
		flags = fmt.Sprintf(" --levels %q", tab.String())
	}
	if cfg.Topic != config.Default().Topic {
		flags += " --topic " + cfg.Topic
	}
	out.Printf("  or: kdelay send --brokers %s%s --target %s --delay %s --value hello\n",
		addr, flags, demoTopic, levels.FormatDuration(ex))
	out.Printf("Watch the target: kcat -C -b %s -t %s -f '%%k %%h %%s\\n'\n\n", addr, demoTopic)
	out.Printf("Deliveries to %s (lateness = arrival - kdelay-due-at); Ctrl-C stops:\n", demoTopic)
}

// demoDelays are the demo's delays as multiples of the first level's
// duration: 1s, 1.5s, 3s, 5s, 7s, 12s and 30s with the default levels.
var demoDelays = []float64{1, 1.5, 3, 5, 7, 12, 30}

// sendDemo produces the demo records: one per demo delay, one by level
// (kdelay-level) and one by absolute time (kdelay-deliver-at).
func sendDemo(ctx context.Context, cfg config.Config, log *slog.Logger, out *syncWriter) error {
	tab := cfg.Table()
	cl, err := newClient(cfg, log, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		return err
	}
	defer cl.Close()
	unit := tab.Duration(1)
	type demoRec struct {
		key     string
		planned time.Duration
		d       levels.Delay
	}
	var recs []demoRec
	for _, m := range demoDelays {
		d := time.Duration(m * float64(unit))
		recs = append(recs, demoRec{"demo-" + levels.FormatDuration(d), d, levels.Delay{Target: demoTopic, Delay: d}})
	}
	lvl := min(2, tab.Levels())
	recs = append(recs, demoRec{"demo-level-" + strconv.Itoa(lvl), tab.Duration(lvl), levels.Delay{Target: demoTopic, Level: lvl}})
	at := time.Duration(2.5 * float64(unit))
	recs = append(recs, demoRec{"demo-at", at, levels.Delay{Target: demoTopic, At: time.Now().Add(at)}})

	now := time.Now()
	var rs []*kgo.Record
	for _, dr := range recs {
		r := &kgo.Record{
			Key:     []byte(dr.key),
			Value:   []byte("planned delay " + levels.FormatDuration(dr.planned)),
			Headers: []kgo.RecordHeader{{Key: demoHeader, Value: []byte(levels.FormatDuration(dr.planned))}},
		}
		if err := tab.Stamp(r, cfg.Topic, dr.d, now); err != nil {
			return fmt.Errorf("demo: %w", err)
		}
		rs = append(rs, r)
	}
	if err := cl.ProduceSync(ctx, rs...).FirstErr(); err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("demo: produce: %w", err)
	}
	out.Printf("sent %d demo records at %s\n", len(rs), now.Format(time.TimeOnly+".000"))
	return nil
}

// watchDeliveries consumes the demo target and the dead-letter topic from
// their start and prints every record as it arrives.
func watchDeliveries(ctx context.Context, cfg config.Config, log *slog.Logger, out *syncWriter, start time.Time) error {
	cl, err := newClient(cfg, log,
		kgo.ConsumeTopics(demoTopic, cfg.DLQTopic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchMaxWait(time.Second),
	)
	if err != nil {
		return err
	}
	defer cl.Close()
	first := true
	for {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil || fs.IsClientClosed() {
			return nil
		}
		arrived := time.Now()
		fs.EachError(func(t string, p int32, err error) {
			log.Warn("demo consumer: fetch error", "topic", t, "partition", p, "err", err)
		})
		fs.EachRecord(func(r *kgo.Record) {
			if r.Topic == cfg.DLQTopic {
				out.Printf("%s  DEAD-LETTERED  key=%s  reason=%q  source=%s\n", arrived.Format(time.TimeOnly+".000"),
					r.Key, header(r, levels.HeaderError), header(r, levels.HeaderSource))
				return
			}
			out.Printf("%s\n", deliveryLine(r, arrived, start))
			if first {
				first = false
				log.Debug("first delivery", "after", arrived.Sub(start).Round(time.Millisecond))
			}
		})
	}
}

// deliveryLine describes a record delivered to the demo target at
// arrived; start is when dev started. The planned delay is shown for the
// demo's own records only. A record due before dev started (an --at in the
// past) shows no lateness: it went at once, and its lateness would only
// measure how old its --at was.
func deliveryLine(r *kgo.Record, arrived, start time.Time) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s  delivered  key=%-14s", arrived.Format(time.TimeOnly+".000"), r.Key)
	if v := header(r, demoHeader); v != "" {
		fmt.Fprintf(&b, " planned=%-6s", v)
	}
	ms, err := strconv.ParseInt(header(r, levels.HeaderDueAt), 10, 64)
	switch {
	case err != nil:
		b.WriteString(" due=?  late=?")
	case time.UnixMilli(ms).Before(start):
		due := time.UnixMilli(ms)
		fmt.Fprintf(&b, " due=%s  late=-  (due before kdelay dev started: sent at once)", due.UTC().Format(time.RFC3339))
	default:
		due := time.UnixMilli(ms)
		l := arrived.Sub(due).Round(time.Millisecond)
		late := fmt.Sprintf("%+dms", l.Milliseconds())
		if l < 0 {
			late += " EARLY"
		}
		fmt.Fprintf(&b, " due=%s  late=%s", due.Format(time.TimeOnly+".000"), late)
	}
	fmt.Fprintf(&b, "  partition=%d", r.Partition)
	return b.String()
}

// header returns the last value of header key, "" if absent.
func header(r *kgo.Record, key string) string {
	for i := len(r.Headers) - 1; i >= 0; i-- {
		if r.Headers[i].Key == key {
			return string(r.Headers[i].Value)
		}
	}
	return ""
}
