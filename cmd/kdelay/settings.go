package main

import (
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"reflect"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/kdelay/kdelay/config"
)

// A setting is a configuration field that a flag mirrors: the flag reads
// its KDELAY_* variable for its default, and a flag given on the command
// line wins. Every value, from either source, is validated once by
// config.Load.
type setting struct {
	flag  string // flag name
	env   string // variable name without the KDELAY_ prefix
	kind  string // duration, int, strings or string (shown in --help)
	usage string
}

// Settings shared by every command that talks to Kafka (persistent flags
// of the root command).
var commonSettings = []setting{
	{"brokers", "BROKERS", "strings", "seed brokers, host:port, comma-separated"},
	{"client-id", "CLIENT_ID", "string", "client ID sent to the brokers"},
	{"topic", "TOPIC", "string", "the delay topic"},
	{"dlq-topic", "DLQ_TOPIC", "string", "the dead-letter topic (default <topic>.dlq)"},
	{"cancel-topic", "CANCEL_TOPIC", "string", "the compacted topic of cancels, keyed by kdelay-id (default <topic>.cancel)"},
	{"levels", "LEVELS", "string", "delay levels, RocketMQ messageDelayLevel style"},
	{"partitions-per-level", "PARTITIONS_PER_LEVEL", "int", "partitions per level (k); the delay topic has levels x k partitions"},
	{"log-level", "LOG_LEVEL", "string", "log level: debug, info, warn or error"},
	{"log-format", "LOG_FORMAT", "string", "log format: text or json"},
}

// Settings of the relay (kdelay run, kdelay dev).
var relaySettings = []setting{
	{"group", "GROUP", "string", "consumer group of the relays"},
	{"data-dir", "DATA_DIR", "string", "directory of the local timer wheel"},
	{"http-addr", "HTTP_ADDR", "string", `address of /metrics, /healthz and /readyz; "off" disables`},
	{"shutdown-timeout", "SHUTDOWN_TIMEOUT", "duration", "bound of the graceful shutdown"},
	{"max-delay", "MAX_DELAY", "duration", "records due later than this after their timestamp are dead-lettered"},
	{"wheel-horizon", "WHEEL_HORIZON", "duration", "longest wait the local wheel takes; longer ones cascade (default: largest gap between levels)"},
	{"wheel-sync", "WHEEL_SYNC", "string", "wheel fsync policy: batch, interval or none"},
	{"fetch-max-wait", "FETCH_MAX_WAIT", "duration", "how long a fetch waits for data"},
	{"instance-id", "INSTANCE_ID", "string", "static group membership: a stable ID per relay (e.g. the pod name); a restarted relay takes its partitions back without a rebalance"},
	{"session-timeout", "SESSION_TIMEOUT", "duration", "how long the group waits for a relay that stopped heartbeating before moving its partitions"},
	{"target-allow", "TARGET_ALLOW", "strings", "glob patterns of allowed target topics, comma-separated (default: all)"},
	{"target-deny", "TARGET_DENY", "strings", "glob patterns of denied target topics, comma-separated"},
	{"target-missing-timeout", "TARGET_MISSING_TIMEOUT", "duration", "how long a missing target topic is retried before dead-lettering"},
	{"missing-topic-grace", "MISSING_TOPIC_GRACE", "duration", "how long run waits for a missing delay, dead-letter or cancel topic (just created, not yet in every broker's metadata) before it exits"},
	{"delivery", "DELIVERY", "string", "at-least-once or exactly-once (one Kafka transaction per batch: forwards, cascades, dead letters and the offset commit)"},
	{"transactional-id", "TRANSACTIONAL_ID", "string", "exactly-once: the relay's transactional ID, stable across its restarts and unique among live relays (default kdelay-<group>-<instance id>, else one kept in the data directory)"},
	{"retry-timeout", "RETRY_TIMEOUT", "duration", "how long a produce error kdelay does not classify is retried before the record is dead-lettered with the error"},
	{"stall-timeout", "STALL_TIMEOUT", "duration", "due work and no delivery for this long: /healthz answers 503 so that a supervisor restarts the relay"},
	{"cancel-margin", "CANCEL_MARGIN", "duration", "a cancel acknowledged at least this long before a record's due time is always honoured"},
	{"cancelled-topic", "CANCELLED_TOPIC", "string", "when set, cancelled records are written there for audit (default: off)"},
	{"allow-level-change", "ALLOW_LEVEL_CHANGE", "bool", "start although records still pending were written under another level table (their kdelay-level is then read by the new table)"},
}

func findSetting(name string) setting {
	for _, s := range append(append([]setting(nil), commonSettings...), relaySettings...) {
		if s.flag == name {
			return s
		}
	}
	panic("kdelay: unknown setting " + name)
}

// settingValue is the pflag.Value of a setting: a string checked for its
// syntax when the flag is parsed (so "--max-delay soon" fails naming the
// flag); the meaning is checked by config.Load.
type settingValue struct {
	s     setting
	value string
}

func (v *settingValue) String() string { return v.value }
func (v *settingValue) Type() string   { return v.s.kind }

func (v *settingValue) Set(s string) error {
	switch v.s.kind {
	case "duration":
		if _, err := time.ParseDuration(s); err != nil {
			return errors.New("not a duration (examples: 500ms, 90s, 1h30m)")
		}
	case "int":
		if _, err := strconv.Atoi(s); err != nil {
			return errors.New("not an integer")
		}
	case "bool":
		if _, err := strconv.ParseBool(s); err != nil {
			return errors.New("not a boolean (true or false)")
		}
	}
	v.value = s
	return nil
}

// envDefault returns the envDefault tag of the config field read from
// KDELAY_<name>.
func envDefault(name string) string {
	t := reflect.TypeFor[config.Config]()
	for i := range t.NumField() {
		f := t.Field(i)
		if tag, _, _ := strings.Cut(f.Tag.Get("env"), ","); tag == name {
			return f.Tag.Get("envDefault")
		}
	}
	return ""
}

// addSettings adds flags for settings to fs. Each flag's default is its
// variable's value when set, else the configuration default; --help shows
// both the variable and the default in force.
func (a *app) addSettings(fs *pflag.FlagSet, ss []setting) {
	for _, s := range ss {
		a.addSetting(fs, s, "")
	}
}

// addSetting adds one setting flag; def, when not empty, replaces the
// configuration default (kdelay dev serves no HTTP unless asked).
func (a *app) addSetting(fs *pflag.FlagSet, s setting, def string) {
	v := &settingValue{s: s, value: envDefault(s.env)}
	if def != "" {
		v.value = def
	}
	if e, ok := a.environ[config.Prefix+s.env]; ok && e != "" {
		v.value = e
	}
	fs.Var(v, s.flag, fmt.Sprintf("%s (env %s%s)", s.usage, config.Prefix, s.env))
	if s.kind == "bool" {
		fs.Lookup(s.flag).NoOptDefVal = "true" // --allow-level-change alone means true
	}
}

// loadClientConfig is loadConfig for the client commands (send, status,
// topic, levels, dlq): they log at warn, so kgo's connection chatter does
// not bury their output, unless --log-level or KDELAY_LOG_LEVEL says
// otherwise.
func (a *app) loadClientConfig(cmd *cobra.Command) (config.Config, error) {
	var overrides map[string]string
	if _, set := a.environ[config.Prefix+"LOG_LEVEL"]; !set && !cmd.Flags().Changed("log-level") {
		overrides = map[string]string{config.Prefix + "LOG_LEVEL": "warn"}
	}
	return a.loadConfig(cmd, overrides)
}

// warnUnknown logs one warning per KDELAY_* variable that no setting reads,
// naming the closest known one.
func warnUnknown(log *slog.Logger, environ map[string]string) {
	for _, u := range config.UnknownVariables(environ) {
		if u.Closest != "" {
			log.Warn("unknown variable ignored; did you mean "+u.Closest+"?", "variable", u.Name)
		} else {
			log.Warn("unknown variable ignored", "variable", u.Name)
		}
	}
}

// environMap returns the process environment as a map.
func environMap() map[string]string {
	m := make(map[string]string)
	for _, kv := range os.Environ() {
		if k, v, ok := strings.Cut(kv, "="); ok {
			m[k] = v
		}
	}
	return m
}

// loadConfig builds the configuration of cmd: the environment, overridden
// by every setting flag given on the command line (and by overrides, for
// settings a command fixes itself), validated by config.Load. An invalid
// configuration is a usage error listing every problem, each naming the
// flag or the variable it came from.
func (a *app) loadConfig(cmd *cobra.Command, overrides map[string]string) (config.Config, error) {
	env := maps.Clone(a.environ)
	var fromFlag []setting
	cmd.Flags().Visit(func(f *pflag.Flag) {
		if v, ok := f.Value.(*settingValue); ok {
			env[config.Prefix+v.s.env] = v.value
			fromFlag = append(fromFlag, v.s)
		}
	})
	// Defaults a command sets itself (dev: no HTTP server) apply unless the
	// flag was given.
	cmd.Flags().VisitAll(func(f *pflag.Flag) {
		if v, ok := f.Value.(*settingValue); ok && !f.Changed && v.value != envDefault(v.s.env) {
			if _, set := env[config.Prefix+v.s.env]; !set {
				env[config.Prefix+v.s.env] = v.value
			}
		}
	})
	maps.Copy(env, overrides)
	cfg, err := config.Load(env)
	if err == nil {
		warnUnknown(cfg.Logger(a.stderr), a.environ)
		return cfg, nil
	}
	// One line per variable: a value that does not parse is also reported
	// by validation as the zero value it left behind.
	var lines []string
	named := make(map[string]bool)
	for line := range strings.SplitSeq(err.Error(), "\n") {
		name, _, ok := strings.Cut(strings.TrimPrefix(line, "config: "), "=")
		if ok && strings.HasPrefix(name, config.Prefix) {
			if named[name] {
				continue
			}
			named[name] = true
		}
		lines = append(lines, line)
	}
	msg := strings.Join(lines, "\n")
	for _, s := range fromFlag {
		msg = strings.ReplaceAll(msg, config.Prefix+s.env+"=", "--"+s.flag+"=")
	}
	return cfg, usageErrorf("invalid configuration:\n  %s", strings.ReplaceAll(msg, "\n", "\n  "))
}
