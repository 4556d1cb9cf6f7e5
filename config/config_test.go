package config

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestDefaults(t *testing.T) {
	c, err := Load(map[string]string{})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name      string
		got, want any
	}{
		{"Brokers", strings.Join(c.Brokers, ","), "localhost:9092"},
		{"Topic", c.Topic, "delay-topic"},
		{"Group", c.Group, "kdelay"},
		{"DLQTopic", c.DLQTopic, "delay-topic.dlq"},
		{"CancelTopic", c.CancelTopic, "delay-topic.cancel"},
		{"CancelMargin", c.CancelMargin, 100 * time.Millisecond},
		{"CancelledTopic", c.CancelledTopic, ""},
		{"PartitionsPerLevel", c.PartitionsPerLevel, 1},
		{"MaxDelay", c.MaxDelay, 720 * time.Hour},
		{"WheelHorizon", c.WheelHorizon, time.Hour},
		{"Partitions", c.Table().Partitions(), int32(18)},
		{"HTTPAddr", c.HTTPAddr, ":8080"},
		{"LogFormat", c.LogFormat, "text"},
		{"WheelSync", c.WheelSync, "batch"},
	} {
		if tc.got != tc.want {
			t.Errorf("%s = %v, want %v", tc.name, tc.got, tc.want)
		}
	}
}

func TestOverrides(t *testing.T) {
	c, err := Load(map[string]string{
		"KDELAY_BROKERS":              "a:1,b:2",
		"KDELAY_TOPIC":                "delays",
		"KDELAY_LEVELS":               "1s 2s 4s",
		"KDELAY_PARTITIONS_PER_LEVEL": "3",
		"KDELAY_TARGET_ALLOW":         "orders.*,billing",
		"KDELAY_LOG_FORMAT":           "json",
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Brokers) != 2 || c.DLQTopic != "delays.dlq" || c.Table().Partitions() != 9 || c.WheelHorizon != 2*time.Second {
		t.Fatalf("unexpected config %+v", c)
	}
}

// TestErrorsNameVariableAndValue: each kind of error names the variable and
// its bad value, and every problem is reported at once.
func TestErrorsNameVariableAndValue(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		name string
		env  map[string]string
		want []string
	}{
		{"duration", map[string]string{"KDELAY_MAX_DELAY": "soon"}, []string{`KDELAY_MAX_DELAY="soon": not a duration`}},
		{"negative duration", map[string]string{"KDELAY_MAX_DELAY": "-1h"}, []string{`KDELAY_MAX_DELAY="-1h0m0s": must be positive`}},
		{"integer", map[string]string{"KDELAY_PARTITIONS_PER_LEVEL": "two"}, []string{`KDELAY_PARTITIONS_PER_LEVEL="two": not an integer`}},
		{"zero partitions", map[string]string{"KDELAY_PARTITIONS_PER_LEVEL": "0"}, []string{`KDELAY_PARTITIONS_PER_LEVEL="0": must be at least 1`}},
		{"bool", map[string]string{"KDELAY_TLS_ENABLED": "maybe"}, []string{`KDELAY_TLS_ENABLED="maybe": not a boolean`}},
		{"levels token", map[string]string{"KDELAY_LEVELS": "1s 5x"}, []string{`KDELAY_LEVELS="1s 5x"`, `entry 2 "5x": not a duration`}},
		{"levels order", map[string]string{"KDELAY_LEVELS": "5s 1s"}, []string{`KDELAY_LEVELS="5s 1s"`, `"1s": not greater`}},
		{"topic", map[string]string{"KDELAY_TOPIC": "bad topic"}, []string{`KDELAY_TOPIC="bad topic": not a valid Kafka topic name`}},
		{"dlq equals topic", map[string]string{"KDELAY_DLQ_TOPIC": "delay-topic"}, []string{`KDELAY_DLQ_TOPIC="delay-topic": must differ`}},
		{"cancel equals dlq", map[string]string{"KDELAY_CANCEL_TOPIC": "delay-topic.dlq"}, []string{`KDELAY_CANCEL_TOPIC="delay-topic.dlq": must differ`}},
		{"cancelled equals cancel", map[string]string{"KDELAY_CANCELLED_TOPIC": "delay-topic.cancel"}, []string{`KDELAY_CANCELLED_TOPIC="delay-topic.cancel": must differ`}},
		{"cancel margin", map[string]string{"KDELAY_CANCEL_MARGIN": "-1s"}, []string{`KDELAY_CANCEL_MARGIN="-1s": must be in [0, 1m]`}},
		{"pattern", map[string]string{"KDELAY_TARGET_DENY": "a[,b"}, []string{`KDELAY_TARGET_DENY="a[,b": bad pattern "a["`}},
		{"log level", map[string]string{"KDELAY_LOG_LEVEL": "loud"}, []string{`KDELAY_LOG_LEVEL="loud"`}},
		{"log format", map[string]string{"KDELAY_LOG_FORMAT": "xml"}, []string{`KDELAY_LOG_FORMAT="xml"`}},
		{"wheel sync", map[string]string{"KDELAY_WHEEL_SYNC": "sometimes"}, []string{`KDELAY_WHEEL_SYNC="sometimes"`}},
		{"sasl mechanism", map[string]string{"KDELAY_SASL_MECHANISM": "GSSAPI"}, []string{`KDELAY_SASL_MECHANISM="GSSAPI"`}},
		{"sasl missing user", map[string]string{"KDELAY_SASL_MECHANISM": "PLAIN", "KDELAY_SASL_PASSWORD": "p"}, []string{`KDELAY_SASL_USERNAME="": required`}},
		{"sasl password file", map[string]string{"KDELAY_SASL_MECHANISM": "PLAIN", "KDELAY_SASL_USERNAME": "u", "KDELAY_SASL_PASSWORD_FILE": filepath.Join(dir, "nope")}, []string{`KDELAY_SASL_PASSWORD_FILE="` + filepath.Join(dir, "nope") + `": cannot read`}},
		{"tls file without tls", map[string]string{"KDELAY_TLS_CA_FILE": "/ca.pem"}, []string{`KDELAY_TLS_CA_FILE="/ca.pem": set, but KDELAY_TLS_ENABLED is false`}},
		{"tls missing file", map[string]string{"KDELAY_TLS_ENABLED": "true", "KDELAY_TLS_CA_FILE": filepath.Join(dir, "ca.pem")}, []string{`KDELAY_TLS_CA_FILE="` + filepath.Join(dir, "ca.pem") + `": cannot read`}},
		{"fetch wait", map[string]string{"KDELAY_FETCH_MAX_WAIT": "2m"}, []string{`KDELAY_FETCH_MAX_WAIT="2m0s"`}},
		{"all at once", map[string]string{"KDELAY_MAX_DELAY": "x", "KDELAY_LOG_FORMAT": "xml", "KDELAY_LEVELS": ""}, []string{`KDELAY_MAX_DELAY="x"`, `KDELAY_LOG_FORMAT="xml"`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Load(tc.env)
			if err == nil {
				t.Fatal("Load succeeded")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q\ndoes not contain %q", err, w)
				}
			}
		})
	}
}

func TestParseErrorReportedOnce(t *testing.T) {
	_, err := Load(map[string]string{"KDELAY_MAX_DELAY": "x"})
	if got := strings.Count(err.Error(), "KDELAY_MAX_DELAY"); got != 1 {
		t.Fatalf("KDELAY_MAX_DELAY named %d times in %q, want once", got, err)
	}
}

func TestTargetAllowed(t *testing.T) {
	c, err := Load(map[string]string{"KDELAY_TARGET_ALLOW": "orders.*,billing", "KDELAY_TARGET_DENY": "orders.secret"})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		topic string
		want  bool
	}{
		{"orders.eu", true}, {"billing", true}, {"orders.secret", false}, {"payments", false},
		{"__consumer_offsets", false}, {"delay-topic", false}, {"delay-topic.dlq", false},
	} {
		if got, why := c.TargetAllowed(tc.topic); got != tc.want {
			t.Errorf("TargetAllowed(%q) = %v (%s), want %v", tc.topic, got, why, tc.want)
		}
	}
	open := Default()
	if ok, _ := open.TargetAllowed("anything"); !ok {
		t.Error("without patterns every ordinary topic is allowed")
	}
}

func TestKafkaOpts(t *testing.T) {
	dir := t.TempDir()
	pw := filepath.Join(dir, "pw")
	if err := os.WriteFile(pw, []byte("secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := Load(map[string]string{"KDELAY_SASL_MECHANISM": "SCRAM-SHA-512", "KDELAY_SASL_USERNAME": "u", "KDELAY_SASL_PASSWORD_FILE": pw, "KDELAY_TLS_ENABLED": "true"})
	if err != nil {
		t.Fatal(err)
	}
	opts, err := c.KafkaOpts(nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(opts) != 4 { // seeds, client id, sasl, dialer
		t.Fatalf("got %d options, want 4", len(opts))
	}
	bad := c
	bad.TLSCAFile = pw // not PEM
	if _, err := bad.KafkaOpts(nil); err == nil || !strings.Contains(err.Error(), "no PEM certificate") {
		t.Fatalf("KafkaOpts with a non-PEM CA: %v", err)
	}
}

func TestLogger(t *testing.T) {
	var buf bytes.Buffer
	c := Default()
	c.LogFormat = "json"
	c.Logger(&buf).Info("hello", "k", 1)
	if !strings.Contains(buf.String(), `"msg":"hello"`) {
		t.Fatalf("json log = %q", buf.String())
	}
	buf.Reset()
	c.LogFormat = "text"
	c.LogLevel = "warn"
	l := c.Logger(&buf)
	l.Info("hidden")
	l.Warn("shown")
	if strings.Contains(buf.String(), "hidden") || !strings.Contains(buf.String(), "shown") || strings.Contains(buf.String(), "\x1b[") {
		t.Fatalf("text log = %q", buf.String())
	}
}

func TestBrokersSetButEmpty(t *testing.T) {
	for _, v := range []string{"", " "} {
		_, err := Load(map[string]string{"KDELAY_BROKERS": v})
		if err == nil || !strings.Contains(err.Error(), "KDELAY_BROKERS=") || !strings.Contains(err.Error(), "set but empty") {
			t.Errorf("KDELAY_BROKERS=%q: err = %v, want set but empty", v, err)
		}
	}
	if _, err := Load(map[string]string{}); err != nil {
		t.Errorf("unset KDELAY_BROKERS: %v", err)
	}
}

func TestHTTPAddr(t *testing.T) {
	for _, tc := range []struct {
		addr string
		ok   bool
	}{
		{":8080", true}, {"off", true}, {"OFF", true}, {"127.0.0.1:0", true}, {"[::1]:9100", true},
		{"nonsense", false}, {"8080", false}, {":http", false}, {":70000", false}, {"", false},
	} {
		_, err := Load(map[string]string{"KDELAY_HTTP_ADDR": tc.addr})
		if tc.addr == "" {
			// Empty means the default (:8080), as for every variable.
			tc.ok = true
		}
		if got := err == nil; got != tc.ok {
			t.Errorf("KDELAY_HTTP_ADDR=%q: err = %v, want ok=%v", tc.addr, err, tc.ok)
		}
		if err != nil && !strings.Contains(err.Error(), "KDELAY_HTTP_ADDR=") {
			t.Errorf("KDELAY_HTTP_ADDR=%q: error does not name the variable: %v", tc.addr, err)
		}
	}
}

func TestUnknownVariables(t *testing.T) {
	got := UnknownVariables(map[string]string{
		"KDELAY_TOPCI":          "x",
		"KDELAY_MAXDELAY":       "1h",
		"KDELAY_FROBNICATE":     "1",
		"KDELAY_TOPIC":          "known",
		"KDELAY_TEST_BROKERS":   "tooling",
		"KDELAY_KAFKA_STATE":    "tooling",
		"PATH":                  "/bin",
		"KDELAY_SESION_TIMEOUT": "1s",
	})
	want := []Unknown{
		{"KDELAY_FROBNICATE", ""},
		{"KDELAY_MAXDELAY", "KDELAY_MAX_DELAY"},
		{"KDELAY_SESION_TIMEOUT", "KDELAY_SESSION_TIMEOUT"},
		{"KDELAY_TOPCI", "KDELAY_TOPIC"},
	}
	if len(got) != len(want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("got[%d] = %v, want %v", i, got[i], want[i])
		}
	}
}
