package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// httpServer serves /metrics, /healthz and /readyz.
type httpServer struct {
	srv *http.Server
	ln  net.Listener
	log *slog.Logger
}

// newHTTPServer listens on addr at once, so a busy port fails the start
// rather than a background goroutine. ready says whether /readyz answers
// 200; it gives the reason when not. live says whether /healthz answers
// 200: an error (the relay is stalled) makes it 503 with the error.
func newHTTPServer(addr string, reg *prometheus.Registry, ready func() (bool, string), live func() error, log *slog.Logger) (*httpServer, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("http: listen on %s (KDELAY_HTTP_ADDR): %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{
		Registry:          reg, // promhttp's own error and in-flight metrics
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelError),
		EnableOpenMetrics: true,
	}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		if err := live(); err != nil {
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprintln(w, "stalled:", err)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		ok, why := ready()
		if !ok {
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprintln(w, "not ready:", why)
			return
		}
		fmt.Fprintln(w, "ready")
	})
	return &httpServer{
		srv: &http.Server{
			Handler:           mux,
			ReadHeaderTimeout: 10 * time.Second,
			ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
		},
		ln:  ln,
		log: log,
	}, nil
}

// Addr returns the address the server listens on.
func (h *httpServer) Addr() string { return h.ln.Addr().String() }

// Serve serves until Shutdown; it returns nil after a shutdown.
func (h *httpServer) Serve() error {
	h.log.Info("http server listening", "addr", h.Addr(), "paths", "/metrics /healthz /readyz")
	if err := h.srv.Serve(h.ln); !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("http: %w", err)
	}
	return nil
}

// Shutdown stops the server, waiting up to timeout for requests in flight.
func (h *httpServer) Shutdown(timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if err := h.srv.Shutdown(ctx); err != nil {
		h.srv.Close()
		return fmt.Errorf("http: shutdown: %w", err)
	}
	return nil
}
