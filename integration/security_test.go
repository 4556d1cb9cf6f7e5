//go:build cluster

package integration

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"maps"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kdelay/kdelay/levels"
)

// The security tier (build tag cluster, KDELAY_TEST_SECURITY=1): a broker
// with a SASL_SSL listener (SCRAM-SHA-512, PLAIN, and OAUTHBEARER with JWTs
// from the test's own OIDC issuer, oauth_test.go) and an SSL listener
// that requires a client certificate, ACLs enforced, started by the test
// itself through KDELAY_KAFKA_CTL (`.ci/kafka.sh start --security DIR`)
// once it has generated the certificates (crypto/x509). The test's own
// clients use the broker's PLAINTEXT listener, a super user there; the
// relays use the secured listeners as User:kdelay, whose ACLs are the
// ones docs/operations.md lists, applied with Kafka's own kafka-acls.
//
//	KDELAY_TEST_SECURITY=1 KDELAY_KAFKA_CTL=$PWD/.ci/kafka.sh \
//	  go test -tags cluster -race -count=1 -v -run '^TestSecurity' ./integration/
const envSecurity = "KDELAY_TEST_SECURITY"

// relayUser is the relay's principal; the client certificate's CN maps to
// the same principal (ssl.principal.mapping.rules).
const relayUser = "kdelay"

// secureBroker is the secured broker of TestSecurity.
type secureBroker struct {
	t        *testing.T
	ctl      string
	state    string   // KDELAY_KAFKA_STATE of this broker
	plain    []string // PLAINTEXT: the test's clients (super user)
	saslSSL  string   // SASL_SSL listener
	ssl      string   // SSL listener, client certificate required
	dir      string   // ca.pem, client.pem, client-key.pem
	password string   // relayUser's password (PLAIN and SCRAM-SHA-512)

	issuer      *oidcIssuer // OAUTHBEARER: the tokens the broker accepts
	oauthSecret string      // oauthClientID's client secret
}

// TestSecurity runs the security scenarios against one secured broker.
func TestSecurity(t *testing.T) {
	if os.Getenv(envSecurity) != "1" {
		requireTier(t, envSecurity+"=1 is not set (run .ci/cluster.sh security, or see docs/dev/ci.md)")
	}
	ctl := os.Getenv(envKafkaCtl)
	if ctl == "" {
		requireTier(t, envKafkaCtl+" is not set: the test starts its broker with .ci/kafka.sh")
	}
	b := startSecureBroker(t, ctl)

	t.Run("SCRAMDeliveryAndForbiddenTarget", func(t *testing.T) { t.Parallel(); b.scramAndForbidden(t) })
	t.Run("PLAINPasswordFile", func(t *testing.T) { t.Parallel(); b.plainPasswordFile(t) })
	t.Run("MutualTLS", func(t *testing.T) { t.Parallel(); b.mutualTLS(t) })
	t.Run("WrongPassword", func(t *testing.T) { t.Parallel(); b.wrongPassword(t) })
	t.Run("ChartValues", func(t *testing.T) { t.Parallel(); b.chartValues(t) })
	t.Run("OAuthBearer", func(t *testing.T) { t.Parallel(); b.oauthDelivery(t) })
	t.Run("OAuthBearerWrongSecret", func(t *testing.T) { t.Parallel(); b.oauthWrongSecret(t) })
}

func startSecureBroker(t *testing.T, ctl string) *secureBroker {
	t.Helper()
	b := &secureBroker{t: t, ctl: ctl, state: t.TempDir(), dir: t.TempDir()}
	pw := make([]byte, 12)
	if _, err := rand.Read(pw); err != nil {
		t.Fatal(err)
	}
	b.password = hex.EncodeToString(pw)
	writeCerts(t, b.dir)
	if _, err := rand.Read(pw); err != nil {
		t.Fatal(err)
	}
	b.oauthSecret = hex.EncodeToString(pw)
	b.issuer = newOIDCIssuer(t)
	b.issuer.clients[oauthClientID] = oauthClient{secret: b.oauthSecret, subject: relayUser}

	start := time.Now()
	out := b.ctlRun(3*time.Minute, "start", "--brokers", "1", "--security", b.dir)
	t.Cleanup(func() {
		if t.Failed() {
			logs, _ := b.ctlOutput(time.Minute, "logs", "60")
			t.Logf("secured broker log tail:\n%s", logs)
		}
		b.ctlRun(2*time.Minute, "stop")
	})
	b.plain = strings.Split(lastLine(out), ",")
	env := b.ctlRun(time.Minute, "env")
	for _, line := range strings.Split(env, "\n") {
		k, v, _ := strings.Cut(strings.TrimPrefix(line, "export "), "=")
		switch k {
		case "KDELAY_TEST_SASL_SSL_BROKERS":
			b.saslSSL = v
		case "KDELAY_TEST_SSL_BROKERS":
			b.ssl = v
		}
	}
	if b.saslSSL == "" || b.ssl == "" {
		t.Fatalf("kafka.sh env printed no SASL_SSL or SSL listener:\n%s", env)
	}
	t.Logf("secured broker up in %s: PLAINTEXT (admin) %s, SASL_SSL %s, SSL %s", time.Since(start).Round(time.Millisecond), strings.Join(b.plain, ","), b.saslSSL, b.ssl)
	return b
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.TrimSpace(lines[len(lines)-1])
}

// ctlOutput runs `kafka.sh args...` on this broker's state and returns its
// stdout.
func (b *secureBroker) ctlOutput(timeout time.Duration, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", append([]string{b.ctl}, args...)...)
	cmd.Env = append(os.Environ(), "KDELAY_KAFKA_STATE="+b.state, "KDELAY_KAFKA_SASL_USERS="+relayUser+":"+b.password,
		"KDELAY_KAFKA_OAUTH_JWKS_URL="+b.issuer.jwksURL(), "KDELAY_KAFKA_OAUTH_ISSUER="+b.issuer.srv.URL)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if err != nil {
		return stdout.String(), fmt.Errorf("kafka.sh %s: %w\n%s%s", strings.Join(args, " "), err, stdout.String(), stderr.String())
	}
	return stdout.String(), nil
}

func (b *secureBroker) ctlRun(timeout time.Duration, args ...string) string {
	b.t.Helper()
	out, err := b.ctlOutput(timeout, args...)
	if err != nil {
		b.t.Fatal(err)
	}
	return out
}

// grantRelay applies the ACLs the relay needs (docs/operations.md, "Production
// Kafka") for scenario s, with writes allowed to the given targets only.
func (b *secureBroker) grantRelay(t *testing.T, s *scenario, targets ...string) {
	t.Helper()
	principal := "User:" + relayUser
	read := []string{"acls", "--add", "--allow-principal", principal,
		"--operation", "Read", "--operation", "Describe", "--topic", s.topic, "--topic", s.topic + ".cancel", "--group", s.group}
	write := []string{"acls", "--add", "--allow-principal", principal,
		"--operation", "Write", "--operation", "Describe", "--topic", s.topic, "--topic", s.dlq}
	for _, tg := range targets {
		write = append(write, "--topic", tg)
	}
	start := time.Now()
	for _, args := range [][]string{read, write} {
		b.ctlRun(time.Minute, args...)
	}
	t.Logf("ACLs for %s: Read+Describe on topics %s, %s.cancel and group %s; Write+Describe on %s, %s, %s (kafka-acls, %s)",
		principal, s.topic, s.topic, s.group, s.topic, s.dlq, strings.Join(targets, ", "), time.Since(start).Round(time.Millisecond))
}

// secureScenario is a scenario on the secured broker: the test's clients
// and `kdelay topic create` on the PLAINTEXT listener, the relays on the
// listener and with the credentials of relayVars.
func (b *secureBroker) secureScenario(t *testing.T, name string, targets map[string]int32, relayVars map[string]string) *scenario {
	t.Helper()
	s := newScenario(t, name, scenarioOpts{levels: "1s 2s 4s 8s", seeds: b.plain, targets: targets, tier: "security"})
	maps.Copy(s.vars, relayVars)
	return s
}

func (b *secureBroker) scramVars() map[string]string {
	return map[string]string{
		"KDELAY_BROKERS":        b.saslSSL,
		"KDELAY_SASL_MECHANISM": "SCRAM-SHA-512",
		"KDELAY_SASL_USERNAME":  relayUser,
		"KDELAY_SASL_PASSWORD":  b.password,
		"KDELAY_TLS_ENABLED":    "true",
		"KDELAY_TLS_CA_FILE":    filepath.Join(b.dir, "ca.pem"),
	}
}

// sendTo sends n records named prefix-NNN to target with delays of 1..3s.
func sendTo(s *scenario, prefix, target string, n int) {
	s.t.Helper()
	s.send(s.stampedSpread(prefix, target, n)...)
}

func (s *scenario) stampedSpread(prefix, target string, n int) []*kgo.Record {
	var out []*kgo.Record
	for i, d := range spread(n, time.Second, 3*time.Second) {
		out = append(out, s.stamped(fmt.Sprintf("%s-%03d", prefix, i), levels.Delay{Target: target, Delay: d}))
	}
	return out
}

// scramAndForbidden: SCRAM-SHA-512 over SASL_SSL. Records for a target the
// relay's principal may write arrive; records for a target it may not
// write (the topic exists; no ACL) go to the dead-letter topic with the
// reason TOPIC_AUTHORIZATION_FAILED, and hold back nothing: the allowed
// records sent with them arrive on time.
func (b *secureBroker) scramAndForbidden(t *testing.T) {
	s := b.secureScenario(t, "secscram", map[string]int32{"orders": 3, "forbidden": 1}, b.scramVars())
	b.grantRelay(t, s, s.target("orders"))
	r := s.startRelay("", 90*time.Second)

	recs := s.stampedSpread("ok", s.target("orders"), 60)
	bad := s.stampedSpread("no", s.target("forbidden"), 10)
	for _, rec := range bad {
		s.expectDeadLetter(string(rec.Key), "TOPIC_AUTHORIZATION_FAILED")
	}
	// Interleaved: the forbidden ones among the allowed ones.
	var all []*kgo.Record
	for i, rec := range recs {
		all = append(all, rec)
		if i%6 == 0 && i/6 < len(bad) {
			all = append(all, bad[i/6])
		}
	}
	s.send(all...)
	ok, no := s.sentKeys("ok-"), s.sentKeys("no-")
	keys := append(slices.Clone(ok), no...)
	s.await(keys, s.lastDue(ok).Add(time.Minute), r)
	s.check(t, "security: SCRAM-SHA-512 over SASL_SSL, forbidden target dead-lettered", keys, 0)
	fo := s.check(t, "security: the allowed records among the forbidden ones", ok, 0)
	if worst := pct(fo.arrive, 1); worst > 10*time.Second {
		t.Errorf("allowed records up to %s late: the forbidden target held them back", fmtDur(worst))
	}
	for _, k := range no[:1] {
		if a := s.obs.arrivals(k); len(a) > 0 {
			t.Logf("dead letter %s: kdelay-error: %s", k, a[0].errText)
		}
	}
	r.stop()
}

// plainPasswordFile: PLAIN over SASL_SSL, the password read from
// KDELAY_SASL_PASSWORD_FILE (a mounted secret: trailing newline).
func (b *secureBroker) plainPasswordFile(t *testing.T) {
	pwFile := filepath.Join(t.TempDir(), "password")
	if err := os.WriteFile(pwFile, []byte(b.password+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	vars := map[string]string{
		"KDELAY_BROKERS":            b.saslSSL,
		"KDELAY_SASL_MECHANISM":     "PLAIN",
		"KDELAY_SASL_USERNAME":      relayUser,
		"KDELAY_SASL_PASSWORD_FILE": pwFile,
		"KDELAY_TLS_ENABLED":        "true",
		"KDELAY_TLS_CA_FILE":        filepath.Join(b.dir, "ca.pem"),
	}
	s := b.secureScenario(t, "secplain", map[string]int32{"orders": 3}, vars)
	b.grantRelay(t, s, s.target("orders"))
	r := s.startRelay("", 90*time.Second)
	sendTo(s, "p", s.target("orders"), 40)
	keys := s.sentKeys("p-")
	s.await(keys, s.lastDue(keys).Add(time.Minute), r)
	s.check(t, "security: PLAIN over SASL_SSL, KDELAY_SASL_PASSWORD_FILE", keys, 0)
	r.stop()
}

// mutualTLS: the SSL listener, which requires a client certificate; the
// principal is the certificate's CN.
func (b *secureBroker) mutualTLS(t *testing.T) {
	vars := map[string]string{
		"KDELAY_BROKERS":       b.ssl,
		"KDELAY_TLS_ENABLED":   "true",
		"KDELAY_TLS_CA_FILE":   filepath.Join(b.dir, "ca.pem"),
		"KDELAY_TLS_CERT_FILE": filepath.Join(b.dir, "client.pem"),
		"KDELAY_TLS_KEY_FILE":  filepath.Join(b.dir, "client-key.pem"),
	}
	s := b.secureScenario(t, "secmtls", map[string]int32{"orders": 3}, vars)
	b.grantRelay(t, s, s.target("orders"))
	r := s.startRelay("", 90*time.Second)
	sendTo(s, "m", s.target("orders"), 40)
	keys := s.sentKeys("m-")
	s.await(keys, s.lastDue(keys).Add(time.Minute), r)
	s.check(t, "security: mutual TLS (client certificate, CN principal)", keys, 0)
	r.stop()
}

// wrongPassword: `kdelay run` with a wrong SCRAM password. It must say
// so at once, with a message that names the authentication failure, and
// must not crash-loop: either it exits once, non-zero, or it stays up
// not ready (/readyz 503, /healthz 200) and retries with a backoff rather
// than hammering the brokers' authenticators. Which of the two it does is
// reported.
func (b *secureBroker) wrongPassword(t *testing.T) {
	const (
		clearWithin = 15 * time.Second
		watch       = 30 * time.Second
		maxLogins   = 30 // SASL handshakes in watch: a backoff, not a spin
	)
	vars := b.scramVars()
	vars["KDELAY_SASL_PASSWORD"] = "not-" + b.password
	s := b.secureScenario(t, "secwrongpw", map[string]int32{"orders": 1}, vars)
	b.grantRelay(t, s, s.target("orders"))
	start := time.Now()
	p := launchRelay(t, "relay-wrongpw", s.vars, filepath.Join(t.TempDir(), "data"), 1)
	defer func() {
		p.gone = true
		if !p.exited() {
			_ = p.cmd.Process.Kill()
			<-p.done
		}
	}()
	const msg = "SASL_AUTHENTICATION_FAILED"
	for !strings.Contains(p.logText(), msg) {
		if time.Since(start) > clearWithin {
			p.dumpLog(20)
			t.Fatalf("no %s message within %s of the start", msg, clearWithin)
		}
		time.Sleep(50 * time.Millisecond)
	}
	first := time.Since(start)
	select {
	case <-p.done:
	case <-time.After(watch - time.Since(start)):
	}
	logins := len(p.logLines("unable to initialize sasl"))
	text := p.logText()
	if strings.Contains(text, "panic:") || strings.Contains(text, "DATA RACE") {
		t.Errorf("kdelay run panicked or raced")
	}
	if p.exited() {
		t.Logf("REPORT security: wrong password: %s after %s; the process exited with code %d after %s; last lines:\n%s",
			msg, first.Round(time.Millisecond), p.code, time.Since(start).Round(time.Millisecond), tailLines(text, 3))
		if p.code == 0 {
			t.Errorf("exit code 0 with a wrong password")
		}
		return
	}
	ready, healthy := httpStatus(p.httpURL+"/readyz"), httpStatus(p.httpURL+"/healthz")
	t.Logf("REPORT security: wrong password: %s after %s; after %s the process is still up (/readyz %d, /healthz %d), %d SASL handshakes so far, retrying with a backoff; its log: %s",
		msg, first.Round(time.Millisecond), watch, ready, healthy, logins, tailLines(strings.Join(p.logLines("cannot check the delay topic"), "\n"), 1))
	if ready != 503 || healthy != 200 {
		t.Errorf("up with a wrong password: /readyz %d, /healthz %d, want 503 and 200", ready, healthy)
	}
	if logins > maxLogins {
		t.Errorf("%d SASL handshakes in %s: a retry loop without backoff", logins, watch)
	}
}

// httpStatus returns the status code of GET url, or 0.
func httpStatus(url string) int {
	c := &http.Client{Timeout: 2 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

func tailLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// chartValues: the Helm chart, rendered with its SASL and TLS values, sets
// exactly the variables these tests use; a relay started with the chart's
// SASL/TLS variables (its mount paths mapped to local files) delivers
// through SASL_SSL with a client certificate.
func (b *secureBroker) chartValues(t *testing.T) {
	helm, err := exec.LookPath("helm")
	if err != nil {
		gopath, _ := exec.Command(goTool(), "env", "GOPATH").Output()
		if p := filepath.Join(strings.TrimSpace(strings.Split(string(gopath), ":")[0]), "bin", "helm"); fileExists(p) {
			helm = p
		} else {
			requireTier(t, "helm is not installed (charts/check.sh installs it with go install)")
		}
	}
	root, err := moduleRoot()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// --kube-version: helm template assumes v1.20 otherwise, below the
	// chart's kubeVersion.
	cmd := exec.CommandContext(ctx, helm, "template", "kdelay", filepath.Join(root, "charts", "kdelay"),
		"--kube-version", "1.32.0", "--show-only", "templates/statefulset.yaml",
		"--set", "kafka.sasl.enabled=true", "--set", "kafka.sasl.mechanism=SCRAM-SHA-512",
		"--set", "kafka.sasl.username="+relayUser, "--set", "kafka.sasl.password="+b.password,
		"--set", "kafka.tls.enabled=true", "--set", "kafka.tls.existingSecret=kafka-tls",
		"--set", "kafka.tls.caKey=ca.pem", "--set", "kafka.tls.certKey=client.pem", "--set", "kafka.tls.keyKey=client-key.pem")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("helm template: %v\n%s", err, stderr.String())
	}
	env := containerEnv(t, string(out))
	got := map[string]string{}
	for k, v := range env {
		if strings.HasPrefix(k, "KDELAY_SASL_") || strings.HasPrefix(k, "KDELAY_TLS_") {
			got[k] = v
		}
	}
	// The variables the other subtests set, SASL and TLS together.
	want := []string{"KDELAY_SASL_MECHANISM", "KDELAY_SASL_PASSWORD_FILE", "KDELAY_SASL_USERNAME",
		"KDELAY_TLS_CA_FILE", "KDELAY_TLS_CERT_FILE", "KDELAY_TLS_ENABLED", "KDELAY_TLS_KEY_FILE"}
	if names := slices.Sorted(maps.Keys(got)); !slices.Equal(names, want) {
		t.Fatalf("chart renders the SASL/TLS variables %v, want exactly %v", names, want)
	}
	t.Logf("chart SASL/TLS variables: %v", got)

	// The chart's mounts, as local files.
	local := t.TempDir()
	vars := map[string]string{"KDELAY_BROKERS": b.saslSSL}
	for k, v := range got {
		if !strings.HasPrefix(v, "/etc/kdelay/") {
			vars[k] = v
			continue
		}
		p := filepath.Join(local, strings.TrimPrefix(v, "/etc/kdelay/"))
		var content []byte
		switch filepath.Base(v) {
		case "password":
			content = []byte(b.password)
		default:
			content, err = os.ReadFile(filepath.Join(b.dir, filepath.Base(v)))
			if err != nil {
				t.Fatalf("%s=%s: no such generated file: %v", k, v, err)
			}
		}
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, content, 0o600); err != nil {
			t.Fatal(err)
		}
		vars[k] = p
	}
	s := b.secureScenario(t, "secchart", map[string]int32{"orders": 3}, vars)
	b.grantRelay(t, s, s.target("orders"))
	r := s.startRelay("", 90*time.Second)
	sendTo(s, "h", s.target("orders"), 20)
	keys := s.sentKeys("h-")
	s.await(keys, s.lastDue(keys).Add(time.Minute), r)
	s.check(t, "security: the chart's SASL/TLS variables (SCRAM, CA, client certificate)", keys, 0)
	r.stop()
}

// containerEnv reads the `- name: X` / `value: Y` pairs of a rendered
// manifest (the chart quotes every value).
func containerEnv(t *testing.T, manifest string) map[string]string {
	t.Helper()
	env := map[string]string{}
	sc := bufio.NewScanner(strings.NewReader(manifest))
	name := ""
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if n, ok := strings.CutPrefix(line, "- name: "); ok && strings.HasPrefix(n, "KDELAY_") {
			name = n
			continue
		}
		if v, ok := strings.CutPrefix(line, "value: "); ok && name != "" {
			if uq, err := strconv.Unquote(v); err == nil {
				v = uq
			}
			env[name] = v
		}
		name = ""
	}
	if len(env) == 0 {
		t.Fatalf("no KDELAY_* variable in the rendered manifest:\n%s", manifest)
	}
	return env
}

// writeCerts writes a CA, a broker certificate (127.0.0.1, localhost) and
// a client certificate (CN=kdelay) into dir: ca.pem, broker.pem (PKCS#8
// key, then the chain, as Kafka's PEM key store wants it), client.pem and
// client-key.pem.
func writeCerts(t *testing.T, dir string) {
	t.Helper()
	now := time.Now()
	key := func() *rsa.PrivateKey {
		k, err := rsa.GenerateKey(rand.Reader, 2048)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	serial := int64(1)
	tmpl := func(cn string) *x509.Certificate {
		serial++
		return &x509.Certificate{
			SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: cn, Organization: []string{"kdelay tests"}},
			NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
			KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		}
	}
	caKey := key()
	ca := tmpl("kdelay test CA")
	ca.IsCA, ca.BasicConstraintsValid = true, true
	ca.KeyUsage = x509.KeyUsageCertSign | x509.KeyUsageCRLSign
	caDER, err := x509.CreateCertificate(rand.Reader, ca, ca, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	caCert, err := x509.ParseCertificate(caDER)
	if err != nil {
		t.Fatal(err)
	}
	issue := func(tm *x509.Certificate) ([]byte, []byte) {
		k := key()
		der, err := x509.CreateCertificate(rand.Reader, tm, caCert, &k.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		p8, err := x509.MarshalPKCS8PrivateKey(k)
		if err != nil {
			t.Fatal(err)
		}
		return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: p8})
	}
	caPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER})
	srv := tmpl("localhost")
	srv.DNSNames, srv.IPAddresses = []string{"localhost"}, []net.IP{net.IPv4(127, 0, 0, 1)}
	srv.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}
	srvCert, srvKey := issue(srv)
	cli := tmpl(relayUser)
	cli.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	cliCert, cliKey := issue(cli)
	files := map[string][]byte{
		"ca.pem":         caPEM,
		"broker.pem":     slices.Concat(srvKey, srvCert, caPEM),
		"client.pem":     cliCert,
		"client-key.pem": cliKey,
	}
	for name, b := range files {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

func fileExists(p string) bool { _, err := os.Stat(p); return err == nil }
