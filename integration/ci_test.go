package integration

import (
	"fmt"
	"os"
	"testing"
)

// skipOrFailInCI skips a test, or a sub-case, that CI is meant to run but
// this environment cannot: under CI=true it fails instead, since Go counts
// a skip as a pass and a missing tool would hide the test for good (as
// charts/chartcheck's helm() does). Skips that are right in a tier (a
// real-broker test on the kfake tier) use t.Skip.
func skipOrFailInCI(t *testing.T, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...)
	if os.Getenv("CI") == "true" {
		t.Fatalf("CI=true and this test must run in CI, but: %s", msg)
	}
	t.Skip(msg)
}
