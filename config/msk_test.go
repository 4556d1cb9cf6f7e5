package config

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// awsEnv points the AWS SDK's default chain at nothing on this machine
// (no shared files, no instance metadata) and sets kv on top. The SDK
// reads the process environment, hence t.Setenv.
func awsEnv(t *testing.T, kv map[string]string) {
	dir := t.TempDir()
	base := map[string]string{
		"AWS_ACCESS_KEY_ID": "", "AWS_SECRET_ACCESS_KEY": "", "AWS_SESSION_TOKEN": "", "AWS_PROFILE": "",
		"AWS_CONFIG_FILE":             filepath.Join(dir, "config"),
		"AWS_SHARED_CREDENTIALS_FILE": filepath.Join(dir, "credentials"),
		"AWS_EC2_METADATA_DISABLED":   "true",
		"AWS_WEB_IDENTITY_TOKEN_FILE": "", "AWS_ROLE_ARN": "",
		"AWS_CONTAINER_CREDENTIALS_FULL_URI": "", "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI": "",
	}
	for k, v := range kv {
		base[k] = v
	}
	for k, v := range base {
		t.Setenv(k, v)
	}
}

// mskChallenge runs the AWS_MSK_IAM mechanism's first step against host
// and decodes the signed request it sends.
func mskChallenge(t *testing.T, host string) (map[string]string, error) {
	t.Helper()
	m, err := mskIAM(context.Background())
	if err != nil {
		return nil, err
	}
	if m.Name() != "AWS_MSK_IAM" {
		t.Fatalf("mechanism %s", m.Name())
	}
	_, first, err := m.Authenticate(context.Background(), host)
	if err != nil {
		return nil, err
	}
	var got map[string]string
	if err := json.Unmarshal(first, &got); err != nil {
		t.Fatalf("first message %q: %v", first, err)
	}
	return got, nil
}

const mskHost = "b-1.kdelay.abc123.c2.kafka.eu-west-1.amazonaws.com:9098"

func TestMSKIAMFromEnvironment(t *testing.T) {
	awsEnv(t, map[string]string{"AWS_ACCESS_KEY_ID": "AKIDENV", "AWS_SECRET_ACCESS_KEY": "secret", "AWS_SESSION_TOKEN": "session-env"})
	got, err := mskChallenge(t, mskHost)
	if err != nil {
		t.Fatal(err)
	}
	if c := got["x-amz-credential"]; !strings.HasPrefix(c, "AKIDENV/") || !strings.Contains(c, "/eu-west-1/kafka-cluster/aws4_request") {
		t.Errorf("x-amz-credential %q: want AKIDENV's, in eu-west-1 for kafka-cluster", c)
	}
	if got["x-amz-security-token"] != "session-env" || got["action"] != "kafka-cluster:Connect" || got["x-amz-signature"] == "" || got["user-agent"] != "kdelay" {
		t.Errorf("signed request %v: want the session token, the Connect action, a signature, user agent kdelay", got)
	}
}

func TestMSKIAMFromProfile(t *testing.T) {
	creds := filepath.Join(t.TempDir(), "credentials")
	if err := os.WriteFile(creds, []byte("[msk]\naws_access_key_id = AKIDFILE\naws_secret_access_key = secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	awsEnv(t, map[string]string{"AWS_SHARED_CREDENTIALS_FILE": creds, "AWS_PROFILE": "msk"})
	got, err := mskChallenge(t, mskHost)
	if err != nil {
		t.Fatal(err)
	}
	if c := got["x-amz-credential"]; !strings.HasPrefix(c, "AKIDFILE/") {
		t.Errorf("x-amz-credential %q: want the profile's key AKIDFILE", c)
	}
	if _, ok := got["x-amz-security-token"]; ok {
		t.Errorf("a security token sent for long-term credentials")
	}
}

func TestMSKIAMNoCredentials(t *testing.T) {
	awsEnv(t, nil)
	_, err := mskChallenge(t, mskHost)
	if !errors.Is(err, ErrAWSCredentials) {
		t.Fatalf("error %v, want ErrAWSCredentials", err)
	}
}
