package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestLimitEdges loads each bounded setting at the last value accepted and
// the first refused (go-gremlins' boundary mutants, see docs/dev/ci.md,
// "Mutation testing"). A refusal must name the variable.
func TestLimitEdges(t *testing.T) {
	for _, tc := range []struct {
		name, value string
		ok          bool
	}{
		{"KDELAY_MAX_DELAY", "1ms", true},
		{"KDELAY_MAX_DELAY", "0s", false},
		{"KDELAY_SHUTDOWN_TIMEOUT", "1ms", true},
		{"KDELAY_SHUTDOWN_TIMEOUT", "0s", false},
		{"KDELAY_FETCH_MAX_WAIT", "1ms", true},
		{"KDELAY_FETCH_MAX_WAIT", "0s", false},
		{"KDELAY_FETCH_MAX_WAIT", "1m", true},
		{"KDELAY_FETCH_MAX_WAIT", "1m1ms", false},
		{"KDELAY_SESSION_TIMEOUT", "1s", true},
		{"KDELAY_SESSION_TIMEOUT", "999ms", false},
		{"KDELAY_SESSION_TIMEOUT", "30m", true},
		{"KDELAY_SESSION_TIMEOUT", "30m1ms", false},
		{"KDELAY_TARGET_MISSING_TIMEOUT", "0s", true},
		{"KDELAY_TARGET_MISSING_TIMEOUT", "-1ms", false},
	} {
		_, err := Load(map[string]string{tc.name: tc.value})
		if (err == nil) != tc.ok {
			t.Errorf("%s=%s: %v, want ok=%v", tc.name, tc.value, err, tc.ok)
		}
		if err != nil && !strings.Contains(err.Error(), tc.name) {
			t.Errorf("%s=%s: error %q does not name the variable", tc.name, tc.value, err)
		}
	}
}

// TestSASLPasswordSources: with a mechanism, a password or a password file
// is required; the password wins over the file (which is then not read).
func TestSASLPasswordSources(t *testing.T) {
	file := filepath.Join(t.TempDir(), "pw")
	if err := os.WriteFile(file, []byte("secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(t.TempDir(), "nope")
	gone := filepath.Join(t.TempDir(), "gone")
	if err := os.WriteFile(gone, []byte("secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	base := map[string]string{"KDELAY_SASL_MECHANISM": "PLAIN", "KDELAY_SASL_USERNAME": "u"}
	with := func(kv ...string) map[string]string {
		m := map[string]string{}
		for k, v := range base {
			m[k] = v
		}
		for i := 0; i+1 < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return m
	}
	for _, tc := range []struct {
		name       string
		env        map[string]string
		loadOK     bool
		kafkaOptOK bool
		rmAfter    string // removed between Load and KafkaOpts
	}{
		{"password", with("KDELAY_SASL_PASSWORD", "p"), true, true, ""},
		{"file", with("KDELAY_SASL_PASSWORD_FILE", file), true, true, ""},
		{"neither", with(), false, false, ""},
		{"password wins over a missing file", with("KDELAY_SASL_PASSWORD", "p", "KDELAY_SASL_PASSWORD_FILE", missing), true, true, ""},
		{"missing file", with("KDELAY_SASL_PASSWORD_FILE", missing), false, false, ""},
		// KafkaOpts reads the file (so a rotated secret is picked up at
		// start): gone by then, it fails.
		{"file gone before KafkaOpts", with("KDELAY_SASL_PASSWORD_FILE", gone), true, false, gone},
	} {
		c, err := Load(tc.env)
		if (err == nil) != tc.loadOK {
			t.Errorf("%s: Load: %v, want ok=%v", tc.name, err, tc.loadOK)
			continue
		}
		if err != nil {
			continue
		}
		if tc.rmAfter != "" {
			os.Remove(tc.rmAfter)
		}
		if _, err := c.KafkaOpts(nil); (err == nil) != tc.kafkaOptOK {
			t.Errorf("%s: KafkaOpts: %v, want ok=%v", tc.name, err, tc.kafkaOptOK)
		}
	}
}
