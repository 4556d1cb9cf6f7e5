package mutant

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const sample = `mutant: the wheel fires late
guard: ./wheel ^TestLate$
guard: ./relay ^TestX$
expect: fired .* late
needs: kfake

# a comment
@@@ a/x.go
	due := it.Due
@@@ becomes
	due := it.Due.Add(3)
@@@ end

@@@ a/x.go
	return due
@@@ becomes
@@@ end
`

func TestParseAndApply(t *testing.T) {
	m, err := Parse("dir/07-late.mutant", []byte(sample))
	if err != nil {
		t.Fatal(err)
	}
	if m.Name != "07-late" || m.Desc != "the wheel fires late" || m.Needs != "kfake" ||
		m.Expect != "fired .* late" || len(m.Guards) != 2 || m.Guards[1] != "./relay ^TestX$" {
		t.Fatalf("header: %+v", m)
	}
	if len(m.Edits) != 2 || m.Edits[0].Find != "\tdue := it.Due\n" || m.Edits[1].Replace != "" {
		t.Fatalf("edits: %+v", m.Edits)
	}
	root := t.TempDir()
	os.MkdirAll(filepath.Join(root, "a"), 0o755)
	src := "func f() {\n\tdue := it.Due\n\treturn due\n}\n"
	p := filepath.Join(root, "a", "x.go")
	if err := os.WriteFile(p, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := m.Apply(root, true); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(p); string(b) != src {
		t.Fatalf("dry run changed the file: %q", b)
	}
	if err := m.Apply(root, false); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(p); string(b) != "func f() {\n\tdue := it.Due.Add(3)\n}\n" {
		t.Fatalf("applied: %q", b)
	}
}

func TestApplyAnchorNotUnique(t *testing.T) {
	m, err := Parse("m.mutant", []byte(sample))
	if err != nil {
		t.Fatal(err)
	}
	for name, src := range map[string]string{
		"missing": "func f() {\n\treturn due\n}\n",
		"twice":   "\tdue := it.Due\n\tdue := it.Due\n\treturn due\n",
		// the second edit's snippet is gone once the first applied
		"indent": "  due := it.Due\n\treturn due\n",
	} {
		root := t.TempDir()
		os.MkdirAll(filepath.Join(root, "a"), 0o755)
		p := filepath.Join(root, "a", "x.go")
		os.WriteFile(p, []byte(src), 0o644)
		if err := m.Apply(root, false); !errors.Is(err, ErrAnchor) {
			t.Errorf("%s: err = %v, want ErrAnchor", name, err)
		}
		if b, _ := os.ReadFile(p); string(b) != src {
			t.Errorf("%s: a failed apply changed the file", name)
		}
	}
}

func TestParseErrors(t *testing.T) {
	for name, text := range map[string]string{
		"no mutant":  strings.Replace(sample, "mutant: the wheel fires late\n", "", 1),
		"no guard":   strings.Replace(strings.Replace(sample, "guard: ./wheel ^TestLate$\n", "", 1), "guard: ./relay ^TestX$\n", "", 1),
		"bad guard":  strings.Replace(sample, "guard: ./wheel ^TestLate$", "guard: ./wheel", 1),
		"no expect":  strings.Replace(sample, "expect: fired .* late\n", "", 1),
		"unclosed":   strings.TrimSuffix(sample, "@@@ end\n"),
		"empty find": "mutant: x\nguard: ./a ^T$\nexpect: y\n@@@ a.go\n@@@ becomes\nz\n@@@ end\n",
		"stray":      sample + "hello\n",
		"no edit":    "mutant: x\nguard: ./a ^T$\nexpect: y\n",
	} {
		if _, err := Parse("m.mutant", []byte(text)); !errors.Is(err, ErrFormat) {
			t.Errorf("%s: err = %v, want ErrFormat", name, err)
		}
	}
}

// TestRepoMutantsApply: every mutant in mutants/ parses and each of its
// find snippets occurs exactly once in the current code, so an edit that
// moves or changes a mutant's anchor fails here, not only in CI's
// mutants step.
func TestRepoMutantsApply(t *testing.T) {
	root := filepath.Join("..", "..")
	files, err := filepath.Glob(filepath.Join(root, "mutants", "*.mutant"))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatal("no mutants/*.mutant")
	}
	stray, _ := filepath.Glob(filepath.Join(root, "mutants", "*.patch"))
	if len(stray) > 0 {
		t.Errorf("mutants/ holds patches, which .ci/mutants.sh ignores: %v", stray)
	}
	for _, f := range files {
		m, err := ParseFile(f)
		if err != nil {
			t.Error(err)
			continue
		}
		if err := m.Apply(root, true); err != nil {
			t.Error(err)
		}
	}
}
