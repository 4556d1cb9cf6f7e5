package kdelay_test

import (
	"os"
	"strings"
	"testing"
)

// TestDocExample: the complete user's test in docs/containers.md is
// example_user_test.go (built with -tags example), from its imports on.
func TestDocExample(t *testing.T) {
	src, err := os.ReadFile("example_user_test.go")
	if err != nil {
		t.Fatal(err)
	}
	doc, err := os.ReadFile("../../docs/containers.md")
	if err != nil {
		t.Fatal(err)
	}
	i := strings.Index(string(src), "import (")
	if i < 0 {
		t.Fatal("example_user_test.go: no import block")
	}
	want := "```go\npackage orders_test\n\n" + string(src[i:]) + "```\n"
	if !strings.Contains(string(doc), want) {
		t.Errorf("docs/containers.md does not quote example_user_test.go from its imports on, as:\n%s", want)
	}
}
