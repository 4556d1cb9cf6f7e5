package kdelay_test

import (
	"os"
	"strings"
	"testing"
)

// TestREADMEExample: the repository README's example of a user's test is
// example_user_test.go (built with -tags example), from its imports on.
func TestREADMEExample(t *testing.T) {
	src, err := os.ReadFile("example_user_test.go")
	if err != nil {
		t.Fatal(err)
	}
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	i := strings.Index(string(src), "import (")
	if i < 0 {
		t.Fatal("example_user_test.go: no import block")
	}
	want := "```go\npackage orders_test\n\n" + string(src[i:]) + "```\n"
	if !strings.Contains(string(readme), want) {
		t.Errorf("README.md does not quote example_user_test.go from its imports on, as:\n%s", want)
	}
}
