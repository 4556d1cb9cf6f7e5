// Package console is kdelay's console: a versioned JSON API over what is
// scheduled (package schedules), and a web page over that API, its assets
// embedded. It is stateless beyond the index a [schedules.Follower] keeps
// current from Kafka: any number of consoles may run, anywhere that
// reaches the brokers.
//
// The API, under /api/v1 (docs/console.md):
//
//	GET    /api/v1/schedules              pending schedules, filtered, cursor-paged
//	GET    /api/v1/schedules/{id}         the records with that kdelay-id
//	DELETE /api/v1/schedules/{id}         cancel (answered after the broker's ack)
//	POST   /api/v1/schedules              schedule a record
//	GET    /api/v1/due                    what comes due when (histogram)
//	GET    /api/v1/dead-letters           the dead letters
//	POST   /api/v1/dead-letters/replay    re-drive them, each at most once
//	GET    /api/v1/status                 levels, lag, next due, relays
//
// /metrics (Prometheus: kdelay_console_pending{level,window}, what waits
// by when it comes due, and the index's size and readiness) and, open
// whatever the auth mode, the probes /healthz (the process
// answers) and /readyz (200 once the index is complete and while the
// brokers answer, else 503).
//
// Errors are JSON, {"error": "..."} plus "param" or "reason" where they
// apply: 400 for a bad parameter or a record the relay would dead-letter,
// 401 for a missing or wrong token, 403 when writes are disabled (no
// token configured), 404 for an unknown id, 503 while the index is not
// complete or the brokers do not answer.
//
// Writes need the bearer token (Options.Token); without one configured
// they are refused. With Options.AuthAll, reads need it too. No cookies
// are set or read.
package console

import (
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kdelay/kdelay/config"
	"github.com/kdelay/kdelay/schedules"
)

// Limits of the API.
const (
	// DefaultLimit is the page size when limit is not given.
	DefaultLimit = 100
	// MaxLimit bounds limit.
	MaxLimit = 1000
	// writeTimeout bounds a write's wait for the broker's acknowledgement.
	writeTimeout = 10 * time.Second
	// replayTimeout bounds a dead-letter replay.
	replayTimeout = 2 * time.Minute
)

// Index is what the server reads: a [schedules.Follower] is one.
type Index interface {
	Index() *schedules.Index
	Ready() <-chan struct{}
	Health() error
	Partitions() []schedules.PartitionStatus
	Group() schedules.Group
}

// Options configure [New].
type Options struct {
	// Index is the index of schedules, kept current (required).
	Index Index
	// Config names the topics and group, the level table and the relay's
	// policy (KDELAY_TARGET_ALLOW/DENY, KDELAY_MAX_DELAY) that a POSTed
	// record is checked against.
	Config config.Config
	// KafkaOpts connect to the cluster, for writes and dead letters.
	KafkaOpts []kgo.Opt
	// Token is the bearer token of writes (KDELAY_CONSOLE_TOKEN); empty
	// refuses every write.
	Token string
	// AuthAll makes reads need the token too (KDELAY_CONSOLE_AUTH=all).
	AuthAll bool
	// Log receives request errors; default slog.Default().
	Log *slog.Logger
	// Now is the clock; default time.Now.
	Now func() time.Time
}

// Server serves the API and the page. Create it with [New]; Close it at
// the end.
type Server struct {
	o      Options
	keyed  *kgo.Client // default partitioner: cancels
	manual *kgo.Client // manual partitioner: delay-topic records
	adm    *kadm.Client
	mux    *http.ServeMux
	// patterns are the API's routes, "METHOD /path".
	patterns []string

	replaying sync.Mutex
}

// New creates the server's Kafka clients.
func New(o Options) (*Server, error) {
	if o.Log == nil {
		o.Log = slog.Default()
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	opts := append(append([]kgo.Opt(nil), o.KafkaOpts...), kgo.RecordDeliveryTimeout(writeTimeout))
	keyed, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("console: kafka client: %w", err)
	}
	manual, err := kgo.NewClient(append(opts, kgo.RecordPartitioner(kgo.ManualPartitioner()))...)
	if err != nil {
		keyed.Close()
		return nil, fmt.Errorf("console: kafka client: %w", err)
	}
	s := &Server{o: o, keyed: keyed, manual: manual, adm: kadm.NewClient(keyed), mux: http.NewServeMux()}
	s.routes()
	return s, nil
}

// Close closes the server's clients.
func (s *Server) Close() {
	s.keyed.Close()
	s.manual.Close()
}

// ServeHTTP serves the API and the page.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'")
	s.mux.ServeHTTP(w, r)
}

func (s *Server) routes() {
	read, write := s.guard(false), s.guard(true)
	for _, r := range []struct {
		pattern string
		h       http.Handler
	}{
		{"GET /api/v1/schedules", read(s.ready(s.listSchedules))},
		{"GET /api/v1/schedules/{id}", read(s.ready(s.getSchedule))},
		{"DELETE /api/v1/schedules/{id}", write(s.ready(s.cancelSchedule))},
		{"POST /api/v1/schedules", write(http.HandlerFunc(s.postSchedule))},
		{"GET /api/v1/due", read(s.ready(s.due))},
		{"GET /api/v1/dead-letters", read(http.HandlerFunc(s.deadLetters))},
		{"POST /api/v1/dead-letters/replay", write(http.HandlerFunc(s.replay))},
		{"GET /api/v1/status", read(http.HandlerFunc(s.status))},
	} {
		s.mux.Handle(r.pattern, r.h)
		s.patterns = append(s.patterns, r.pattern)
	}
	// What waits, for Prometheus (a read: the token with KDELAY_CONSOLE_AUTH=all).
	reg := prometheus.NewRegistry()
	reg.MustRegister(newCollector(s))
	s.mux.Handle("GET /metrics", read(promhttp.HandlerFor(reg, promhttp.HandlerOpts{})))
	// Probes, open whatever the auth mode: no data in them.
	s.mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = w.Write([]byte("ok\n"))
	})
	s.mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		if err := s.unavailable(); err != nil {
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = w.Write([]byte("not ready: " + err.Error() + "\n"))
			return
		}
		_, _ = w.Write([]byte("ready\n"))
	})
	s.mux.Handle("/api/", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, apiError{Error: fmt.Sprintf("no API endpoint %s %s", r.Method, r.URL.Path)})
	}))
	page := pageHandler()
	s.mux.Handle("/", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		page.ServeHTTP(w, r)
	}))
}

// apiError is the body of every error answer.
type apiError struct {
	Error string `json:"error"`
	// Param names the bad query parameter or body field (400).
	Param string `json:"param,omitempty"`
	// Reason is the relay's dead-letter reason label for a record it
	// would dead-letter (400), e.g. "bad_delay", "target_refused".
	Reason string `json:"reason,omitempty"`
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v) // the client went away
}

func writeError(w http.ResponseWriter, code int, e apiError) { writeJSON(w, code, e) }

// guard checks the bearer token of writes (write true) and, with AuthAll,
// of reads.
func (s *Server) guard(write bool) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if !write && !s.o.AuthAll {
				next.ServeHTTP(w, r)
				return
			}
			if s.o.Token == "" {
				msg := "writes are disabled: this console has no token; set KDELAY_CONSOLE_TOKEN to allow cancel, schedule and replay"
				if !write {
					msg = "reads are disabled: KDELAY_CONSOLE_AUTH=all without KDELAY_CONSOLE_TOKEN"
				}
				writeError(w, http.StatusForbidden, apiError{Error: msg})
				return
			}
			got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
			if !ok || subtle.ConstantTimeCompare([]byte(strings.TrimSpace(got)), []byte(s.o.Token)) != 1 {
				w.Header().Set("WWW-Authenticate", `Bearer realm="kdelay console"`)
				writeError(w, http.StatusUnauthorized, apiError{Error: "missing or wrong bearer token (Authorization: Bearer <KDELAY_CONSOLE_TOKEN>)"})
				return
			}
			next.ServeHTTP(w, r)
		})
	}
}

// ready answers 503 until the index is complete, and while the brokers do
// not answer.
func (s *Server) ready(next http.HandlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := s.unavailable(); err != nil {
			writeError(w, http.StatusServiceUnavailable, apiError{Error: err.Error()})
			return
		}
		next(w, r)
	})
}

// errNotReady is the 503 before the index is complete.
var errNotReady = errors.New("console: the index is being built (reading the delay topic, the commits and the cancel topic); try again shortly")

func (s *Server) unavailable() error {
	select {
	case <-s.o.Index.Ready():
	default:
		if err := s.o.Index.Health(); err != nil {
			return err
		}
		return errNotReady
	}
	return s.o.Index.Health()
}

// brokerFailure answers a write or read that Kafka did not answer: 503.
func (s *Server) brokerFailure(w http.ResponseWriter, what string, err error) {
	s.o.Log.Warn("console: kafka request failed", "what", what, "err", err)
	writeError(w, http.StatusServiceUnavailable, apiError{Error: fmt.Sprintf("%s: %v", what, err)})
}
