package relay

import (
	"flag"
	"fmt"
	"os"
	"testing"
)

// waitingTests is how many tests run at once when -parallel is not given:
// most of this package's tests wait on real time, not on the CPU, so the
// default of GOMAXPROCS leaves a small machine idle.
const waitingTests = "4"

func TestMain(m *testing.M) {
	flag.Parse()
	given := false
	flag.Visit(func(f *flag.Flag) { given = given || f.Name == "test.parallel" })
	if !given {
		if err := flag.Set("test.parallel", waitingTests); err != nil {
			fmt.Fprintln(os.Stderr, "relay tests:", err)
			os.Exit(2)
		}
	}
	os.Exit(m.Run())
}
