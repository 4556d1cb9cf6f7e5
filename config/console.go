package config

import (
	"errors"
	"fmt"
	"net"
	"strconv"

	"github.com/caarlos0/env/v11"
)

// Console is the configuration of kdelay console, read from its own
// variables on top of [Config] (the brokers, topics, group and levels it
// reads). Field docs name the variable and its default.
type Console struct {
	// Addr, KDELAY_CONSOLE_ADDR: where the console serves its API and web
	// page, [host]:port; default 127.0.0.1:8081 (loopback only).
	Addr string `env:"CONSOLE_ADDR" envDefault:"127.0.0.1:8081"`
	// Token, KDELAY_CONSOLE_TOKEN: the bearer token the console asks of
	// every write (cancel, schedule, dead-letter replay); default none, and
	// without one every write is refused.
	Token string `env:"CONSOLE_TOKEN"`
	// Auth, KDELAY_CONSOLE_AUTH: writes (default: only writes need the
	// token) or all (reads need it too).
	Auth string `env:"CONSOLE_AUTH" envDefault:"writes"`
}

// Console auth modes.
const (
	ConsoleAuthWrites = "writes"
	ConsoleAuthAll    = "all"
)

// LoadConsole reads the console's variables from environ (the process
// environment when nil) and validates them; the error lists every problem.
func LoadConsole(environ map[string]string) (Console, error) {
	opts := env.Options{Prefix: Prefix}
	if environ != nil {
		opts.Environment = environ
	}
	c, err := env.ParseAsWithOptions[Console](opts)
	if err != nil {
		return c, fmt.Errorf("config: %w", err)
	}
	var problems []error
	if _, port, err := net.SplitHostPort(c.Addr); err != nil || !validPort(port) {
		problems = append(problems, fmt.Errorf("config: %sCONSOLE_ADDR=%q: want [host]:port with a port in 0..65535", Prefix, c.Addr))
	}
	if c.Auth != ConsoleAuthWrites && c.Auth != ConsoleAuthAll {
		problems = append(problems, fmt.Errorf("config: %sCONSOLE_AUTH=%q: want writes or all", Prefix, c.Auth))
	}
	if c.Auth == ConsoleAuthAll && c.Token == "" {
		problems = append(problems, fmt.Errorf("config: %sCONSOLE_AUTH=all needs %sCONSOLE_TOKEN: every request would be refused", Prefix, Prefix))
	}
	return c, errors.Join(problems...)
}

func validPort(p string) bool {
	n, err := strconv.Atoi(p)
	return err == nil && n >= 0 && n <= 65535
}
