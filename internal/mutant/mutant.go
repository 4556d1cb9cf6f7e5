// Package mutant reads and applies the guarantee mutants in mutants/
// (see .ci/mutants.sh): each mutant file breaks one guarantee on purpose
// by replacing exact snippets of code, so it survives edits that move the
// code (no line numbers, no diff context).
//
// A mutant file is a header, then one or more edits:
//
//	mutant: the wheel fires 3 s late (lateness bound)
//	guard: ./wheel ^TestLateness$      (one or more; run in order)
//	expect: fired .* late               (the failure a kill must show)
//	needs: kfake                        (or broker)
//
//	@@@ wheel/wheel.go
//		due := it.Due
//	@@@ becomes
//		due := it.Due.Add(3 * time.Second)
//	@@@ end
//
// The lines between `@@@ PATH` and `@@@ becomes` (the find snippet) must
// occur exactly once in PATH, byte for byte, tabs included; they are
// replaced by the lines up to `@@@ end`. Text outside edits and headers
// (blank lines, `#` comments) is ignored.
package mutant

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// Edit replaces the one occurrence of Find in File (a slash path
// relative to the tree's root) by Replace.
type Edit struct {
	File    string
	Find    string
	Replace string
	Line    int // line of the `@@@ PATH` marker in the mutant file
}

// Mutant is one parsed mutant file.
type Mutant struct {
	Name   string   // file name without the .mutant extension
	Desc   string   // mutant: what it breaks
	Guards []string // guard: "<package> <-run regexp>", in order
	Expect string   // expect: the regexp a kill must show
	Needs  string   // needs: kfake or broker
	Edits  []Edit
}

// ErrFormat is wrapped by every parse error.
var ErrFormat = errors.New("mutant: bad format")

// ErrAnchor is wrapped when a find snippet does not occur exactly once.
var ErrAnchor = errors.New("mutant: find snippet not found exactly once")

const marker = "@@@ "

// Parse reads a mutant file's text; name is used in errors and as Name.
func Parse(name string, text []byte) (*Mutant, error) {
	m := &Mutant{Name: strings.TrimSuffix(filepath.Base(name), ".mutant")}
	sc := bufio.NewScanner(bytes.NewReader(text))
	sc.Buffer(make([]byte, 0, 64*1024), 1<<20)
	var (
		ln    int
		cur   *Edit
		part  int // 0: outside, 1: find, 2: replace
		lines []string
	)
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: %s:%d: %s", ErrFormat, name, ln, fmt.Sprintf(format, a...))
	}
	for sc.Scan() {
		ln++
		line := sc.Text()
		if strings.HasPrefix(line, marker) || line == "@@@" {
			arg := strings.TrimSpace(strings.TrimPrefix(line, "@@@"))
			switch {
			case part == 0:
				if arg == "" || arg == "becomes" || arg == "end" {
					return nil, bad("expected `@@@ PATH`, got %q", line)
				}
				cur, part, lines = &Edit{File: filepath.ToSlash(arg), Line: ln}, 1, nil
			case part == 1 && arg == "becomes":
				if len(lines) == 0 {
					return nil, bad("empty find snippet")
				}
				cur.Find, part, lines = strings.Join(lines, "\n")+"\n", 2, nil
			case part == 2 && arg == "end":
				if len(lines) > 0 {
					cur.Replace = strings.Join(lines, "\n") + "\n"
				}
				m.Edits = append(m.Edits, *cur)
				cur, part, lines = nil, 0, nil
			default:
				return nil, bad("unexpected %q", line)
			}
			continue
		}
		if part != 0 {
			lines = append(lines, line)
			continue
		}
		key, val, ok := strings.Cut(line, ": ")
		switch {
		case strings.TrimSpace(line) == "" || strings.HasPrefix(line, "#"):
		case ok && key == "mutant":
			m.Desc = val
		case ok && key == "guard":
			m.Guards = append(m.Guards, strings.TrimSpace(val))
		case ok && key == "expect":
			m.Expect = val
		case ok && key == "needs":
			m.Needs = strings.TrimSpace(val)
		default:
			return nil, bad("unexpected line %q outside an edit", line)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("mutant: read %s: %w", name, err)
	}
	if part != 0 {
		return nil, bad("edit not closed by `@@@ end`")
	}
	switch {
	case m.Desc == "":
		return nil, bad("no `mutant:` line")
	case len(m.Guards) == 0:
		return nil, bad("no `guard:` line")
	case m.Expect == "":
		return nil, bad("no `expect:` line")
	case len(m.Edits) == 0:
		return nil, bad("no edit")
	}
	for _, g := range m.Guards {
		if pkg, run, ok := strings.Cut(g, " "); !ok || pkg == "" || strings.TrimSpace(run) == "" {
			return nil, bad("guard %q: want `<package> <-run regexp>`", g)
		}
	}
	return m, nil
}

// ParseFile reads and parses one mutant file.
func ParseFile(path string) (*Mutant, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("mutant: %w", err)
	}
	return Parse(path, b)
}

// Apply applies m's edits to the tree at root, in order (a later edit
// sees the earlier ones). With dryRun it only checks that each find
// snippet occurs exactly once and writes nothing. An edit whose snippet
// is missing or ambiguous fails with ErrAnchor and leaves no file of the
// tree changed.
func (m *Mutant) Apply(root string, dryRun bool) error {
	files := map[string]string{}
	var order []string
	for _, e := range m.Edits {
		text, ok := files[e.File]
		if !ok {
			b, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(e.File)))
			if err != nil {
				return fmt.Errorf("mutant %s: edit at line %d: %w", m.Name, e.Line, err)
			}
			text = string(b)
			order = append(order, e.File)
		}
		if n := strings.Count(text, e.Find); n != 1 {
			return fmt.Errorf("%w: mutant %s, edit at line %d: %s has it %d times",
				ErrAnchor, m.Name, e.Line, e.File, n)
		}
		files[e.File] = strings.Replace(text, e.Find, e.Replace, 1)
	}
	if dryRun {
		return nil
	}
	for _, f := range order {
		p := filepath.Join(root, filepath.FromSlash(f))
		st, err := os.Stat(p)
		if err != nil {
			return fmt.Errorf("mutant %s: %w", m.Name, err)
		}
		if err := os.WriteFile(p, []byte(files[f]), st.Mode().Perm()); err != nil {
			return fmt.Errorf("mutant %s: %w", m.Name, err)
		}
	}
	return nil
}
