package config

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/oauth"
	"golang.org/x/oauth2"
	"golang.org/x/oauth2/clientcredentials"
)

// ErrOAuthToken is wrapped by every failure to get an OAUTHBEARER token
// from the token endpoint.
var ErrOAuthToken = errors.New("config: OAUTHBEARER token")

// tokenRefreshFactor is the share of a token's lifetime after which a new
// one is fetched, as Kafka's sasl.login.refresh.window.factor.
const tokenRefreshFactor = 0.8

// tokenFetchTimeout bounds one request to the token endpoint.
const tokenFetchTimeout = 30 * time.Second

// validateOAuth checks the OAUTHBEARER settings: the token URL is required
// with OAUTHBEARER and is an absolute http(s) URL; none of them is set
// with another mechanism.
func (c *Config) validateOAuth() []error {
	var errs []error
	bad := func(name string, value any, format string, args ...any) {
		errs = append(errs, fmt.Errorf("config: %s%s=%q: %s", Prefix, name, fmt.Sprint(value), fmt.Sprintf(format, args...)))
	}
	if !strings.EqualFold(c.SASLMechanism, "OAUTHBEARER") {
		for _, f := range []struct{ name, value string }{
			{"SASL_OAUTH_TOKEN_URL", c.SASLOAuthTokenURL}, {"SASL_OAUTH_SCOPE", c.SASLOAuthScope},
		} {
			if f.value != "" {
				bad(f.name, f.value, "set, but KDELAY_SASL_MECHANISM is not OAUTHBEARER")
			}
		}
		if len(c.SASLOAuthExtensions) > 0 {
			bad("SASL_OAUTH_EXTENSIONS", extensionsString(c.SASLOAuthExtensions), "set, but KDELAY_SASL_MECHANISM is not OAUTHBEARER")
		}
		return errs
	}
	if c.SASLOAuthTokenURL == "" {
		bad("SASL_OAUTH_TOKEN_URL", "", "required with KDELAY_SASL_MECHANISM=OAUTHBEARER")
	} else if u, err := url.Parse(c.SASLOAuthTokenURL); err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		bad("SASL_OAUTH_TOKEN_URL", c.SASLOAuthTokenURL, "want an absolute http or https URL (https://issuer.example/oauth2/token)")
	}
	for k, v := range c.SASLOAuthExtensions {
		// RFC 7628 3.1: key = 1*(ALPHA); value = 1*(VCHAR / SP / HTAB / CR / LF)
		if k == "" || strings.TrimLeft(k, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ") != "" || k == "auth" {
			bad("SASL_OAUTH_EXTENSIONS", extensionsString(c.SASLOAuthExtensions), "key %q: want letters only, not \"auth\" (key=value,key=value)", k)
		} else if v == "" || strings.ContainsRune(v, '\x01') {
			bad("SASL_OAUTH_EXTENSIONS", extensionsString(c.SASLOAuthExtensions), "key %q: empty or invalid value", k)
		}
	}
	return errs
}

// oauthMechanism returns the OAUTHBEARER mechanism: each authentication
// sends a token from one shared TokenSource (the client id is
// KDELAY_SASL_USERNAME, the secret is secret) and the configured
// extensions.
func (c Config) oauthMechanism(secret string, now func() time.Time) sasl.Mechanism {
	ts := NewTokenSource(c.SASLOAuthTokenURL, c.SASLUsername, secret, strings.Fields(c.SASLOAuthScope), now)
	ext := c.SASLOAuthExtensions
	return oauth.Oauth(func(ctx context.Context) (oauth.Auth, error) {
		tok, err := ts.Token(ctx)
		return oauth.Auth{Token: tok, Extensions: ext}, err
	})
}

func extensionsString(m map[string]string) string {
	var b strings.Builder
	for k, v := range m {
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		b.WriteString(k + "=" + v)
	}
	return b.String()
}

// TokenSource fetches OAuth access tokens with the client credentials
// grant (RFC 6749 4.4) and caches each one until tokenRefreshFactor of its
// lifetime has passed; a token without expires_in is fetched anew each
// time. It is safe for concurrent use: callers wait for one fetch.
type TokenSource struct {
	cc  clientcredentials.Config
	now func() time.Time

	mu        sync.Mutex
	token     string
	refreshAt time.Time // zero: fetch on the next call
}

// NewTokenSource returns a TokenSource for the token endpoint tokenURL.
// The client authenticates with HTTP Basic, as Kafka's own client does,
// and falls back to the form body when the endpoint refuses Basic. now is
// the clock (time.Now in production).
func NewTokenSource(tokenURL, clientID, clientSecret string, scopes []string, now func() time.Time) *TokenSource {
	return &TokenSource{
		cc: clientcredentials.Config{
			ClientID:     clientID,
			ClientSecret: clientSecret,
			TokenURL:     tokenURL,
			Scopes:       scopes,
		},
		now: now,
	}
}

// Token returns a valid access token, fetching one when the cached one is
// due for refresh. Errors wrap ErrOAuthToken and name the endpoint; a
// refusal by the endpoint (wrong client id or secret) carries its
// "error" and "error_description" fields.
func (s *TokenSource) Token(ctx context.Context) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	if s.token != "" && !s.refreshAt.IsZero() && now.Before(s.refreshAt) {
		return s.token, nil
	}
	ctx, cancel := context.WithTimeout(ctx, tokenFetchTimeout)
	defer cancel()
	t, err := s.cc.Token(ctx)
	if err != nil {
		var re *oauth2.RetrieveError
		if errors.As(err, &re) {
			return "", fmt.Errorf("%w from %s: refused with HTTP %d: %s %s", ErrOAuthToken, s.cc.TokenURL, re.Response.StatusCode, re.ErrorCode, re.ErrorDescription)
		}
		return "", fmt.Errorf("%w from %s: %w", ErrOAuthToken, s.cc.TokenURL, err)
	}
	if t.AccessToken == "" {
		return "", fmt.Errorf("%w from %s: the response has no access_token", ErrOAuthToken, s.cc.TokenURL)
	}
	s.token, s.refreshAt = t.AccessToken, time.Time{}
	if !t.Expiry.IsZero() {
		// x/oauth2 sets Expiry from expires_in by the wall clock; the
		// lifetime is applied to s.now.
		life := time.Until(t.Expiry)
		s.refreshAt = now.Add(time.Duration(float64(life) * tokenRefreshFactor))
	}
	return s.token, nil
}
