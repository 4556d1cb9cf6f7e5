//go:build cluster

package integration

import (
	"crypto"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math/big"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// oidcIssuer is the small OIDC issuer of the security tier: a token
// endpoint for the client credentials grant (HTTP Basic or form
// credentials) that issues RS256 JWTs, and the JWKS endpoint the secured
// broker validates them with (KDELAY_KAFKA_OAUTH_JWKS_URL).
type oidcIssuer struct {
	srv     *httptest.Server
	key     *rsa.PrivateKey
	kid     string
	clients map[string]oauthClient // by client id

	mu     sync.Mutex
	issued int
	jwks   int // JWKS requests served
}

type oauthClient struct{ secret, subject string }

func newOIDCIssuer(t *testing.T) *oidcIssuer {
	t.Helper()
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	is := &oidcIssuer{key: key, kid: "kdelay-test-1", clients: map[string]oauthClient{}}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /token", is.token)
	mux.HandleFunc("GET /jwks", is.keys)
	is.srv = httptest.NewServer(mux)
	t.Cleanup(is.srv.Close)
	return is
}

func (is *oidcIssuer) tokenURL() string { return is.srv.URL + "/token" }
func (is *oidcIssuer) jwksURL() string  { return is.srv.URL + "/jwks" }

func (is *oidcIssuer) counts() (issued, jwks int) {
	is.mu.Lock()
	defer is.mu.Unlock()
	return is.issued, is.jwks
}

func b64(b []byte) string { return base64.RawURLEncoding.EncodeToString(b) }

func (is *oidcIssuer) keys(w http.ResponseWriter, _ *http.Request) {
	is.mu.Lock()
	is.jwks++
	is.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{"keys": []map[string]string{{
		"kty": "RSA", "use": "sig", "alg": "RS256", "kid": is.kid,
		"n": b64(is.key.N.Bytes()), "e": b64(big.NewInt(int64(is.key.E)).Bytes()),
	}}})
}

func (is *oidcIssuer) token(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	if err := r.ParseForm(); err != nil || r.PostForm.Get("grant_type") != "client_credentials" {
		w.WriteHeader(http.StatusBadRequest)
		fmt.Fprint(w, `{"error":"unsupported_grant_type"}`)
		return
	}
	id, secret, ok := r.BasicAuth()
	if !ok {
		id, secret = r.PostForm.Get("client_id"), r.PostForm.Get("client_secret")
	}
	c, known := is.clients[id]
	if !known || secret != c.secret {
		w.WriteHeader(http.StatusUnauthorized)
		fmt.Fprint(w, `{"error":"invalid_client","error_description":"client authentication failed"}`)
		return
	}
	const life = 10 * time.Minute
	now := time.Now()
	jwt, err := is.sign(map[string]any{
		"iss": is.srv.URL, "sub": c.subject, "aud": "kafka", "azp": id,
		"iat": now.Unix(), "nbf": now.Unix(), "exp": now.Add(life).Unix(),
		"scope": r.PostForm.Get("scope"),
	})
	if err != nil {
		w.WriteHeader(http.StatusInternalServerError)
		return
	}
	is.mu.Lock()
	is.issued++
	is.mu.Unlock()
	_ = json.NewEncoder(w).Encode(map[string]any{"access_token": jwt, "token_type": "Bearer", "expires_in": int(life.Seconds())})
}

// sign returns the RS256 JWT of claims.
func (is *oidcIssuer) sign(claims map[string]any) (string, error) {
	h, err := json.Marshal(map[string]string{"alg": "RS256", "typ": "JWT", "kid": is.kid})
	if err != nil {
		return "", err
	}
	c, err := json.Marshal(claims)
	if err != nil {
		return "", err
	}
	input := b64(h) + "." + b64(c)
	sum := sha256.Sum256([]byte(input))
	sig, err := rsa.SignPKCS1v15(rand.Reader, is.key, crypto.SHA256, sum[:])
	if err != nil {
		return "", err
	}
	return input + "." + b64(sig), nil
}

// oauthVars are a relay's settings for OAUTHBEARER over SASL_SSL as
// client id with secret (written to a file, as a mounted secret).
func (b *secureBroker) oauthVars(t *testing.T, id, secret string) map[string]string {
	f := filepath.Join(t.TempDir(), "client-secret")
	if err := os.WriteFile(f, []byte(secret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return map[string]string{
		"KDELAY_BROKERS":              b.saslSSL,
		"KDELAY_SASL_MECHANISM":       "OAUTHBEARER",
		"KDELAY_SASL_USERNAME":        id,
		"KDELAY_SASL_PASSWORD_FILE":   f,
		"KDELAY_SASL_OAUTH_TOKEN_URL": b.issuer.tokenURL(),
		"KDELAY_SASL_OAUTH_SCOPE":     "kafka",
		"KDELAY_TLS_ENABLED":          "true",
		"KDELAY_TLS_CA_FILE":          filepath.Join(b.dir, "ca.pem"),
	}
}

// oauthDelivery: OAUTHBEARER over SASL_SSL. The relay gets a JWT from the
// test's issuer with the client credentials grant; the broker validates
// it against the issuer's JWKS and maps its sub to User:kdelay, whose
// ACLs let the records through.
func (b *secureBroker) oauthDelivery(t *testing.T) {
	s := b.secureScenario(t, "secoauth", map[string]int32{"orders": 3}, b.oauthVars(t, oauthClientID, b.oauthSecret))
	b.grantRelay(t, s, s.target("orders"))
	r := s.startRelay("", 90*time.Second)
	sendTo(s, "o", s.target("orders"), 40)
	keys := s.sentKeys("o-")
	s.await(keys, s.lastDue(keys).Add(time.Minute), r)
	s.check(t, "security: OAUTHBEARER (OIDC client credentials, JWT checked by the broker's JWKS validator) over SASL_SSL", keys, 0)
	r.stop()
	issued, jwks := b.issuer.counts()
	if issued == 0 {
		t.Errorf("the issuer issued no token")
	}
	t.Logf("REPORT security: OAUTHBEARER: %d tokens issued, %d JWKS requests by the broker", issued, jwks)
}

// oauthWrongSecret: a wrong client secret is refused by the token
// endpoint; kdelay says so (the endpoint, HTTP 401, invalid_client), stays
// up and not ready, and never reaches the broker with a token.
func (b *secureBroker) oauthWrongSecret(t *testing.T) {
	const clearWithin = 15 * time.Second
	s := b.secureScenario(t, "secoauthbad", map[string]int32{"orders": 1}, b.oauthVars(t, oauthClientID, "not-"+b.oauthSecret))
	start := time.Now()
	p := launchRelay(t, "relay-oauthbad", s.vars, filepath.Join(t.TempDir(), "data"), 1)
	defer func() {
		p.gone = true
		if !p.exited() {
			_ = p.cmd.Process.Kill()
			<-p.done
		}
	}()
	want := []string{"OAUTHBEARER token from " + b.issuer.tokenURL(), "HTTP 401", "invalid_client"}
	for {
		text := p.logText()
		all := true
		for _, w := range want {
			all = all && strings.Contains(text, w)
		}
		if all {
			break
		}
		if time.Since(start) > clearWithin || p.exited() {
			p.dumpLog(20)
			t.Fatalf("no log naming %q within %s of the start", want, clearWithin)
		}
		time.Sleep(50 * time.Millisecond)
	}
	first := time.Since(start)
	if ready := httpStatus(p.httpURL + "/readyz"); ready != 503 {
		t.Errorf("/readyz %d with a wrong client secret, want 503", ready)
	}
	t.Logf("REPORT security: OAUTHBEARER wrong client secret: after %s: %s", first.Round(time.Millisecond),
		tailLines(strings.Join(p.logLines("invalid_client"), "\n"), 1))
}

// oauthClientID is the relay's OAuth client; its tokens' sub is relayUser.
const oauthClientID = "kdelay-relay"
