package config

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestAuthValidation(t *testing.T) {
	dir := t.TempDir()
	secret := filepath.Join(dir, "secret")
	if err := os.WriteFile(secret, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	oauth := func(kv ...string) map[string]string {
		m := map[string]string{
			"KDELAY_SASL_MECHANISM":       "OAUTHBEARER",
			"KDELAY_SASL_USERNAME":        "kdelay-client",
			"KDELAY_SASL_PASSWORD_FILE":   secret,
			"KDELAY_SASL_OAUTH_TOKEN_URL": "https://issuer.example/oauth2/token",
		}
		for i := 0; i < len(kv); i += 2 {
			if kv[i+1] == "" {
				delete(m, kv[i])
			} else {
				m[kv[i]] = kv[i+1]
			}
		}
		return m
	}
	for _, tc := range []struct {
		name string
		env  map[string]string
		want []string // empty: valid
	}{
		{"oauth valid", oauth("KDELAY_SASL_OAUTH_SCOPE", "kafka openid", "KDELAY_SASL_OAUTH_EXTENSIONS", "logicalCluster=lkc-1,identityPoolId=pool-2"), nil},
		{"oauth lower case", oauth("KDELAY_SASL_MECHANISM", "oauthbearer"), nil},
		{"oauth no token url", oauth("KDELAY_SASL_OAUTH_TOKEN_URL", ""), []string{`KDELAY_SASL_OAUTH_TOKEN_URL="": required with KDELAY_SASL_MECHANISM=OAUTHBEARER`}},
		{"oauth relative url", oauth("KDELAY_SASL_OAUTH_TOKEN_URL", "/token"), []string{`KDELAY_SASL_OAUTH_TOKEN_URL="/token": want an absolute http or https URL`}},
		{"oauth ftp url", oauth("KDELAY_SASL_OAUTH_TOKEN_URL", "ftp://issuer/token"), []string{`KDELAY_SASL_OAUTH_TOKEN_URL="ftp://issuer/token"`}},
		{"oauth no client id", oauth("KDELAY_SASL_USERNAME", ""), []string{`KDELAY_SASL_USERNAME="": required with KDELAY_SASL_MECHANISM=OAUTHBEARER`}},
		{"oauth no secret", oauth("KDELAY_SASL_PASSWORD_FILE", ""), []string{`KDELAY_SASL_PASSWORD="": required with KDELAY_SASL_MECHANISM=OAUTHBEARER`}},
		{"oauth bad extension key", oauth("KDELAY_SASL_OAUTH_EXTENSIONS", "logical_cluster=lkc-1"), []string{`KDELAY_SASL_OAUTH_EXTENSIONS=`, `key "logical_cluster": want letters only`}},
		{"oauth extension auth", oauth("KDELAY_SASL_OAUTH_EXTENSIONS", "auth=x"), []string{`key "auth"`}},
		{"oauth extension no value", oauth("KDELAY_SASL_OAUTH_EXTENSIONS", "logicalCluster"), []string{`KDELAY_SASL_OAUTH_EXTENSIONS=`}},
		{"token url without oauth", map[string]string{"KDELAY_SASL_OAUTH_TOKEN_URL": "https://issuer.example/token"}, []string{`KDELAY_SASL_OAUTH_TOKEN_URL="https://issuer.example/token": set, but KDELAY_SASL_MECHANISM is not OAUTHBEARER`}},
		{"scope with scram", map[string]string{"KDELAY_SASL_MECHANISM": "SCRAM-SHA-512", "KDELAY_SASL_USERNAME": "u", "KDELAY_SASL_PASSWORD": "p", "KDELAY_SASL_OAUTH_SCOPE": "kafka"}, []string{`KDELAY_SASL_OAUTH_SCOPE="kafka": set, but KDELAY_SASL_MECHANISM is not OAUTHBEARER`}},
		{"extensions without oauth", map[string]string{"KDELAY_SASL_OAUTH_EXTENSIONS": "a=b"}, []string{`KDELAY_SASL_OAUTH_EXTENSIONS="a=b": set, but`}},
		{"msk valid", map[string]string{"KDELAY_SASL_MECHANISM": "AWS_MSK_IAM", "KDELAY_TLS_ENABLED": "true"}, nil},
		{"msk without tls", map[string]string{"KDELAY_SASL_MECHANISM": "AWS_MSK_IAM"}, []string{`KDELAY_TLS_ENABLED="false": must be true with AWS_MSK_IAM`}},
		{"msk with username", map[string]string{"KDELAY_SASL_MECHANISM": "AWS_MSK_IAM", "KDELAY_TLS_ENABLED": "true", "KDELAY_SASL_USERNAME": "u", "KDELAY_SASL_PASSWORD": "p"}, []string{`KDELAY_SASL_USERNAME="u": not used with AWS_MSK_IAM`, `KDELAY_SASL_PASSWORD="p": not used`}},
		{"unknown mechanism lists all", map[string]string{"KDELAY_SASL_MECHANISM": "GSSAPI"}, []string{`must be PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER or AWS_MSK_IAM`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Load(tc.env)
			if len(tc.want) == 0 {
				if err != nil {
					t.Fatalf("Load: %v", err)
				}
				if _, err := c.KafkaOpts(nil); err != nil {
					t.Fatalf("KafkaOpts: %v", err)
				}
				return
			}
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
	c, err := Load(oauth("KDELAY_SASL_OAUTH_EXTENSIONS", "logicalCluster=lkc-1,identityPoolId=pool-2"))
	if err != nil {
		t.Fatal(err)
	}
	if got := c.SASLOAuthExtensions; len(got) != 2 || got["logicalCluster"] != "lkc-1" || got["identityPoolId"] != "pool-2" {
		t.Errorf("extensions = %v, want logicalCluster=lkc-1 and identityPoolId=pool-2", got)
	}
}

// tokenEndpoint is an httptest OAuth token endpoint for the client
// credentials grant: it checks the client's Basic credentials and
// answers with numbered tokens valid for expiresIn seconds (0: no
// expires_in).
type tokenEndpoint struct {
	*httptest.Server
	id, secret string
	expiresIn  int

	mu     sync.Mutex
	issued int
	scopes []string
}

func newTokenEndpoint(t *testing.T, id, secret string, expiresIn int) *tokenEndpoint {
	e := &tokenEndpoint{id: id, secret: secret, expiresIn: expiresIn}
	e.Server = httptest.NewServer(http.HandlerFunc(e.serve))
	t.Cleanup(e.Close)
	return e
}

func (e *tokenEndpoint) serve(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	if err := r.ParseForm(); err != nil || r.Method != http.MethodPost || r.PostForm.Get("grant_type") != "client_credentials" {
		w.WriteHeader(http.StatusBadRequest)
		fmt.Fprint(w, `{"error":"unsupported_grant_type"}`)
		return
	}
	id, secret, ok := r.BasicAuth()
	if !ok {
		id, secret = r.PostForm.Get("client_id"), r.PostForm.Get("client_secret")
	}
	if id != e.id || secret != e.secret {
		w.WriteHeader(http.StatusUnauthorized)
		fmt.Fprint(w, `{"error":"invalid_client","error_description":"Invalid client or Invalid client credentials"}`)
		return
	}
	e.mu.Lock()
	e.issued++
	n := e.issued
	e.scopes = append(e.scopes, r.PostForm.Get("scope"))
	e.mu.Unlock()
	resp := map[string]any{"access_token": fmt.Sprintf("token-%d", n), "token_type": "Bearer"}
	if e.expiresIn > 0 {
		resp["expires_in"] = e.expiresIn
	}
	_ = json.NewEncoder(w).Encode(resp)
}

func (e *tokenEndpoint) count() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.issued
}

// clock is a settable time source.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func TestTokenSourceRefreshesBeforeExpiry(t *testing.T) {
	e := newTokenEndpoint(t, "kdelay", "s3cret", 300) // 5 minutes: refreshed after 4
	clk := &clock{t: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
	ts := NewTokenSource(e.URL, "kdelay", "s3cret", []string{"kafka", "openid"}, clk.now)
	ctx := context.Background()
	for _, step := range []struct {
		advance time.Duration
		want    string
	}{
		{0, "token-1"},
		{time.Minute, "token-1"},
		{3*time.Minute - time.Second, "token-1"}, // 3m59s of 5m: still cached
		{time.Second, "token-2"},                 // 4m: 80% of the lifetime, a new token
		{3 * time.Minute, "token-2"},
		{time.Minute, "token-3"},
	} {
		clk.advance(step.advance)
		got, err := ts.Token(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if got != step.want {
			t.Fatalf("after +%s: token %q, want %q", step.advance, got, step.want)
		}
	}
	if e.count() != 3 {
		t.Errorf("%d tokens fetched, want 3", e.count())
	}
	if e.scopes[0] != "kafka openid" {
		t.Errorf("scope %q, want %q", e.scopes[0], "kafka openid")
	}
}

func TestTokenSourceWithoutExpiryFetchesEachTime(t *testing.T) {
	e := newTokenEndpoint(t, "kdelay", "s3cret", 0)
	ts := NewTokenSource(e.URL, "kdelay", "s3cret", nil, time.Now)
	for want := 1; want <= 3; want++ {
		got, err := ts.Token(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if got != fmt.Sprintf("token-%d", want) {
			t.Fatalf("token %q, want token-%d", got, want)
		}
	}
	if e.scopes[0] != "" {
		t.Errorf("scope %q sent, want none", e.scopes[0])
	}
}

func TestTokenSourceWrongSecret(t *testing.T) {
	e := newTokenEndpoint(t, "kdelay", "s3cret", 300)
	ts := NewTokenSource(e.URL, "kdelay", "wrong", nil, time.Now)
	_, err := ts.Token(context.Background())
	if !errors.Is(err, ErrOAuthToken) {
		t.Fatalf("error %v does not wrap ErrOAuthToken", err)
	}
	for _, w := range []string{e.URL, "HTTP 401", "invalid_client", "Invalid client credentials"} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error %q does not name %q", err, w)
		}
	}
	if e.count() != 0 {
		t.Errorf("%d tokens issued to a wrong secret", e.count())
	}
}

func TestTokenSourceEndpointDown(t *testing.T) {
	e := newTokenEndpoint(t, "kdelay", "s3cret", 300)
	url := e.URL
	e.Close()
	ts := NewTokenSource(url, "kdelay", "s3cret", nil, time.Now)
	_, err := ts.Token(context.Background())
	if !errors.Is(err, ErrOAuthToken) || !strings.Contains(err.Error(), url) {
		t.Fatalf("error %v: want ErrOAuthToken naming %s", err, url)
	}
}

// TestOAuthMechanism: the SASL mechanism built from the settings sends
// the endpoint's token and the extensions in its first message (RFC 7628).
func TestOAuthMechanism(t *testing.T) {
	e := newTokenEndpoint(t, "kdelay", "s3cret", 300)
	secret := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(secret, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := Load(map[string]string{
		"KDELAY_SASL_MECHANISM":        "OAUTHBEARER",
		"KDELAY_SASL_USERNAME":         "kdelay",
		"KDELAY_SASL_PASSWORD_FILE":    secret,
		"KDELAY_SASL_OAUTH_TOKEN_URL":  e.URL,
		"KDELAY_SASL_OAUTH_EXTENSIONS": "logicalCluster=lkc-1",
	})
	if err != nil {
		t.Fatal(err)
	}
	m := c.oauthMechanism("s3cret", time.Now)
	if m.Name() != "OAUTHBEARER" {
		t.Fatalf("mechanism %s", m.Name())
	}
	_, first, err := m.Authenticate(context.Background(), "broker:9093")
	if err != nil {
		t.Fatal(err)
	}
	if want := "n,,\x01auth=Bearer token-1\x01logicalCluster=lkc-1\x01\x01"; string(first) != want {
		t.Errorf("first message %q, want %q", first, want)
	}
	bad := c.oauthMechanism("wrong", time.Now)
	if _, _, err := bad.Authenticate(context.Background(), "broker:9093"); !errors.Is(err, ErrOAuthToken) {
		t.Errorf("wrong secret: %v, want ErrOAuthToken", err)
	}
}
