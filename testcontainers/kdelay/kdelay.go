package kdelay

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/docker/docker/api/types/network"
	"github.com/testcontainers/testcontainers-go"
	"github.com/testcontainers/testcontainers-go/wait"
)

// httpPort is the relay's HTTP port inside the container (the image's
// KDELAY_HTTP_ADDR :8080), published when the relay does not use the
// host's network.
const httpPort = "8080/tcp"

// Default values of the options.
const (
	// DefaultTopic is the delay topic when WithTopic is not given.
	DefaultTopic = "delay-topic"
	// DefaultStartupTimeout bounds topic creation plus the wait for
	// /readyz when WithStartupTimeout is not given.
	DefaultStartupTimeout = 2 * time.Minute
)

// ErrNoBrokers is returned by Run when no WithBrokers option names a broker.
var ErrNoBrokers = errors.New("kdelay: no brokers (use WithBrokers)")

// Container is a running kdelay relay.
type Container struct {
	*testcontainers.DockerContainer
	settings options
	httpAddr string // host:port of /readyz, /healthz and /metrics
}

// Topic is the delay topic the relay reads: producers write there.
func (c *Container) Topic() string { return c.settings.topic }

// Brokers are the seed brokers the relay was given.
func (c *Container) Brokers() []string { return append([]string(nil), c.settings.brokers...) }

// HTTPEndpoint is the base URL of the relay's /readyz, /healthz and
// /metrics, reachable from the test ("http://host:port").
func (c *Container) HTTPEndpoint() string { return "http://" + c.httpAddr }

// Run starts kdelay from img (a kdelay image, e.g. "kdelay:0.1.0") and
// returns once /readyz answers 200. Options are this package's With…
// functions and any testcontainers.ContainerCustomizer, applied in order
// after the module's defaults. A container that was created is returned
// also with an error, so that testcontainers.CleanupContainer can remove
// it.
func Run(ctx context.Context, img string, opts ...testcontainers.ContainerCustomizer) (*Container, error) {
	o := options{topic: DefaultTopic, startupTimeout: DefaultStartupTimeout, createTopics: true}
	for _, opt := range opts {
		if apply, ok := opt.(Option); ok {
			if err := apply(&o); err != nil {
				return nil, err
			}
		}
	}
	if len(o.brokers) == 0 {
		return nil, ErrNoBrokers
	}
	ctx, cancel := context.WithTimeout(ctx, o.startupTimeout)
	defer cancel()

	env := o.env()
	base := []testcontainers.ContainerCustomizer{}
	httpAddr := ""
	if o.hostNetwork {
		port, err := freePort()
		if err != nil {
			return nil, fmt.Errorf("kdelay: a free port for the relay's HTTP server: %w", err)
		}
		httpAddr = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		env["KDELAY_HTTP_ADDR"] = httpAddr
		base = append(base, hostNetwork)
	} else {
		base = append(base, testcontainers.WithExposedPorts(httpPort))
	}
	base = append(base, testcontainers.WithEnv(env))

	if o.createTopics {
		if err := createTopics(ctx, img, base, opts); err != nil {
			return nil, err
		}
	}

	all := append(append(base, opts...), testcontainers.WithCmd("run"))
	ctr, err := testcontainers.Run(ctx, img, all...)
	var c *Container
	if ctr != nil {
		c = &Container{DockerContainer: ctr, settings: o}
	}
	if err != nil {
		return c, fmt.Errorf("kdelay: run %s: %w", img, err)
	}
	if httpAddr == "" {
		ep, err := ctr.PortEndpoint(ctx, httpPort, "")
		if err != nil {
			return c, fmt.Errorf("kdelay: the relay's HTTP port: %w", err)
		}
		httpAddr = ep
	}
	c.httpAddr = httpAddr
	if err := c.waitReady(ctx); err != nil {
		return c, err
	}
	return c, nil
}

// createTopics runs img once as "kdelay topic create" with the relay's
// settings and customizers, and fails with its output unless it exits 0.
func createTopics(ctx context.Context, img string, base, opts []testcontainers.ContainerCustomizer) error {
	all := append(append(append([]testcontainers.ContainerCustomizer{}, base...), opts...),
		testcontainers.WithCmd("topic", "create"),
		testcontainers.WithWaitStrategy(wait.ForExit().WithExitTimeout(time.Minute)))
	ctr, err := testcontainers.Run(ctx, img, all...)
	if ctr != nil {
		defer func() { _ = ctr.Terminate(context.WithoutCancel(ctx)) }()
	}
	if err != nil {
		return fmt.Errorf("kdelay: topic create: %w", err)
	}
	st, err := ctr.State(ctx)
	if err != nil {
		return fmt.Errorf("kdelay: topic create: state: %w", err)
	}
	if st.ExitCode != 0 {
		return fmt.Errorf("kdelay: topic create exited %d: %s", st.ExitCode, logs(ctx, ctr))
	}
	return nil
}

// waitReady polls /readyz until it answers 200, the container stops or ctx
// ends; the relay's log tail is in the error.
func (c *Container) waitReady(ctx context.Context) error {
	url := c.HTTPEndpoint() + "/readyz"
	client := &http.Client{Timeout: 2 * time.Second}
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	last := "no answer yet"
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return fmt.Errorf("kdelay: %w", err)
		}
		if resp, err := client.Do(req); err != nil {
			last = err.Error()
		} else {
			body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			last = fmt.Sprintf("%d %s", resp.StatusCode, strings.TrimSpace(string(body)))
		}
		if st, err := c.State(ctx); err == nil && !st.Running {
			return fmt.Errorf("kdelay: the relay exited (code %d) before /readyz answered 200: %s", st.ExitCode, logs(ctx, c))
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("kdelay: %s not ready (last: %s): %w: %s", url, last, ctx.Err(), logs(context.WithoutCancel(ctx), c))
		case <-tick.C:
		}
	}
}

// logs is the tail of a container's output, for errors.
func logs(ctx context.Context, c testcontainers.Container) string {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	rc, err := c.Logs(ctx)
	if err != nil {
		return "(no logs: " + err.Error() + ")"
	}
	defer rc.Close()
	b, _ := io.ReadAll(rc)
	const max = 4096
	if len(b) > max {
		b = b[len(b)-max:]
	}
	return "\n" + string(b)
}

// hostNetwork puts a container in the host's network namespace. The
// provider adds its default network to every request (podman's API lists
// it under another name than testcontainers expects, so it adds a network
// of its own), and an engine refuses a network with the host mode: the
// endpoint settings are cleared.
var hostNetwork = testcontainers.CustomizeRequestOption(func(req *testcontainers.GenericContainerRequest) error {
	req.NetworkMode = "host"
	prev := req.EndpointSettingsModifier
	req.EndpointSettingsModifier = func(m map[string]*network.EndpointSettings) {
		if prev != nil {
			prev(m)
		}
		clear(m)
	}
	return nil
})

// freePort is a TCP port on 127.0.0.1 that nothing listened on a moment ago.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
