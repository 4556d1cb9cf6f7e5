package config

import (
	"reflect"
	"slices"
	"strings"
)

// toolingPrefixes start KDELAY_* variables that the tests, benchmarks and
// CI scripts read, not the binary; they draw no warning.
var toolingPrefixes = []string{
	"KDELAY_TEST_", "KDELAY_KAFKA_", "KDELAY_CACHE",
	"KDELAY_WHEEL_CRASH_", "KDELAY_WHEEL_MODEL_", "KDELAY_WHEEL_BENCH_", "KDELAY_WHEEL_BURST",
}

// Names returns every variable Config reads, sorted.
func Names() []string { return names(reflect.TypeFor[Config]()) }

// ConsoleNames returns every variable Console (kdelay console) reads,
// sorted.
func ConsoleNames() []string { return names(reflect.TypeFor[Console]()) }

func names(t reflect.Type) []string {
	var out []string
	for i := range t.NumField() {
		if tag, _, _ := strings.Cut(t.Field(i).Tag.Get("env"), ","); tag != "" {
			out = append(out, Prefix+tag)
		}
	}
	slices.Sort(out)
	return out
}

// Unknown is a KDELAY_* variable the configuration does not read, with the
// known name closest to it.
type Unknown struct {
	Name    string
	Closest string // "" when no known name is close
}

// UnknownVariables returns the KDELAY_* variables of environ that no
// setting reads (a typo such as KDELAY_TOPCI is otherwise silently
// ignored), sorted by name, each with the closest known name. Variables of
// the test and CI tooling (KDELAY_TEST_*, KDELAY_KAFKA_*, ...) are left out.
func UnknownVariables(environ map[string]string) []Unknown {
	known := append(Names(), ConsoleNames()...)
	var out []Unknown
	for name := range environ {
		if !strings.HasPrefix(name, Prefix) || slices.Contains(known, name) {
			continue
		}
		if slices.ContainsFunc(toolingPrefixes, func(p string) bool { return strings.HasPrefix(name, p) }) {
			continue
		}
		u := Unknown{Name: name}
		best := -1
		for _, k := range known {
			d := editDistance(strings.TrimPrefix(name, Prefix), strings.TrimPrefix(k, Prefix))
			// Close: at most a third of the name's letters differ.
			if d <= max(2, len(k)/3) && (best < 0 || d < best) {
				best, u.Closest = d, k
			}
		}
		out = append(out, u)
	}
	slices.SortFunc(out, func(a, b Unknown) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// editDistance is the optimal string alignment distance of a and b
// (Levenshtein plus transpositions, so TOPCI is one edit from TOPIC).
func editDistance(a, b string) int {
	d := make([][]int, len(a)+1)
	for i := range d {
		d[i] = make([]int, len(b)+1)
		d[i][0] = i
	}
	for j := range d[0] {
		d[0][j] = j
	}
	for i := 1; i <= len(a); i++ {
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			d[i][j] = min(d[i-1][j]+1, d[i][j-1]+1, d[i-1][j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				d[i][j] = min(d[i][j], d[i-2][j-2]+1)
			}
		}
	}
	return d[len(a)][len(b)]
}
