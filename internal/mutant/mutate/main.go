// Command mutate applies one guarantee mutant (mutants/*.mutant) to a
// tree, or checks that it would apply; .ci/mutants.sh runs it.
//
//	mutate [-n] -C DIR FILE.mutant   apply to DIR (-n: check only)
//	mutate -field NAME FILE.mutant   print a header field: desc, needs,
//	                                 expect, or guards (one a line)
//
// Exit status 2 means the mutant does not parse or does not apply.
package main

import (
	"flag"
	"fmt"
	"os"
	"strings"

	"github.com/kdelay/kdelay/internal/mutant"
)

func main() {
	dir := flag.String("C", ".", "root of the tree to mutate")
	dry := flag.Bool("n", false, "check that the mutant applies; change nothing")
	field := flag.String("field", "", "print a header field (desc, needs, expect, guards) and exit")
	flag.Parse()
	if flag.NArg() != 1 {
		fmt.Fprintln(os.Stderr, "usage: mutate [-n] [-C DIR] [-field NAME] FILE.mutant")
		os.Exit(2)
	}
	m, err := mutant.ParseFile(flag.Arg(0))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	switch *field {
	case "":
	case "desc":
		fmt.Println(m.Desc)
		return
	case "needs":
		fmt.Println(m.Needs)
		return
	case "expect":
		fmt.Println(m.Expect)
		return
	case "guards":
		fmt.Println(strings.Join(m.Guards, "\n"))
		return
	default:
		fmt.Fprintf(os.Stderr, "mutate: unknown field %q\n", *field)
		os.Exit(2)
	}
	if err := m.Apply(*dir, *dry); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
}
