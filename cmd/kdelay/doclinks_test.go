package main

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"
)

// repoRoot is the repository root, seen from this package's directory.
const repoRoot = "../.."

// docPages returns README.md, the chart's README and every page under
// docs/, as paths relative to the repository root.
func docPages(t *testing.T) []string {
	t.Helper()
	pages := []string{"README.md", "charts/kdelay/README.md"}
	err := filepath.WalkDir(filepath.Join(repoRoot, "docs"), func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && strings.HasSuffix(p, ".md") {
			rel, err := filepath.Rel(repoRoot, p)
			if err != nil {
				return err
			}
			pages = append(pages, filepath.ToSlash(rel))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return pages
}

var (
	fenceRE   = regexp.MustCompile("(?ms)^\\s*```.*?^\\s*```[^\\n]*$")
	codeRE    = regexp.MustCompile("`[^`\\n]*`")
	linkRE    = regexp.MustCompile(`\]\(([^)\s]+)\)`)
	headingRE = regexp.MustCompile("(?m)^#{1,6} +(.+?) *#*$")
	htmlIDRE  = regexp.MustCompile(`<a (?:id|name)="([^"]+)"`)
	slugDrop  = regexp.MustCompile(`[^\p{L}\p{N} _-]`)
)

// stripCode removes fenced blocks and inline code, where a "](x)" is not a
// link.
func stripCode(md string) string {
	return codeRE.ReplaceAllString(fenceRE.ReplaceAllString(md, ""), "")
}

// anchors returns the anchors GitHub makes of a page's headings (lower
// case, punctuation dropped, spaces to hyphens, "-1", "-2"... for repeats)
// and of its <a id> tags.
func anchors(md string) map[string]bool {
	out := map[string]bool{}
	seen := map[string]int{}
	for _, m := range headingRE.FindAllStringSubmatch(fenceRE.ReplaceAllString(md, ""), -1) {
		s := strings.ReplaceAll(slugDrop.ReplaceAllString(strings.ToLower(m[1]), ""), " ", "-")
		if n := seen[s]; n > 0 {
			out[s+"-"+strconv.Itoa(n)] = true
		} else {
			out[s] = true
		}
		seen[s]++
	}
	for _, m := range htmlIDRE.FindAllStringSubmatch(md, -1) {
		out[m[1]] = true
	}
	return out
}

// TestDocLinks: every relative link of the README and the docs names a file
// or directory that exists, and every #anchor a heading of its page.
func TestDocLinks(t *testing.T) {
	pages := docPages(t)
	if len(pages) < 10 {
		t.Fatalf("found %d pages; is the docs/ tree where this test looks?", len(pages))
	}
	cache := map[string]map[string]bool{}
	anchorsOf := func(path string) (map[string]bool, error) {
		if a, ok := cache[path]; ok {
			return a, nil
		}
		b, err := os.ReadFile(filepath.Join(repoRoot, path))
		if err != nil {
			return nil, err
		}
		cache[path] = anchors(string(b))
		return cache[path], nil
	}
	links := 0
	for _, page := range pages {
		b, err := os.ReadFile(filepath.Join(repoRoot, page))
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range linkRE.FindAllStringSubmatch(stripCode(string(b)), -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			links++
			file, anchor, _ := strings.Cut(target, "#")
			path := page
			if file != "" {
				path = filepath.ToSlash(filepath.Join(filepath.Dir(page), file))
				if strings.HasPrefix(path, "../") {
					t.Errorf("%s: link %s leaves the repository", page, target)
					continue
				}
				if _, err := os.Stat(filepath.Join(repoRoot, path)); err != nil {
					t.Errorf("%s: link %s: no such file or directory %s", page, target, path)
					continue
				}
			}
			if anchor == "" {
				continue
			}
			if !strings.HasSuffix(path, ".md") {
				t.Errorf("%s: link %s: an anchor into a file that is not markdown", page, target)
				continue
			}
			a, err := anchorsOf(path)
			if err != nil {
				t.Fatal(err)
			}
			if !a[anchor] {
				t.Errorf("%s: link %s: %s has no heading with anchor #%s", page, target, path, anchor)
			}
		}
	}
	if links < 20 {
		t.Errorf("found only %d relative links; is the link pattern stale?", links)
	}
}

// TestAnchors pins the anchor rule on headings the docs link to.
func TestAnchors(t *testing.T) {
	a := anchors("# Settings: flags and `KDELAY_*` variables\n## Guarantee mutants: `.ci/mutants.sh`\n## Notes\n## Notes\n```\n# not a heading\n```\n")
	for _, want := range []string{"settings-flags-and-kdelay_-variables", "guarantee-mutants-cimutantssh", "notes", "notes-1"} {
		if !a[want] {
			t.Errorf("anchor %q missing from %v", want, a)
		}
	}
	if a["not-a-heading"] {
		t.Errorf("a comment in a code block made an anchor: %v", a)
	}
}

// TestGuaranteesDoc: docs/guarantees.md links every mutant in mutants/,
// and every test it names is defined in the repository, so the page
// cannot cite a test that was renamed or a mutant that was dropped.
func TestGuaranteesDoc(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(repoRoot, "docs/guarantees.md"))
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	patches, err := filepath.Glob(filepath.Join(repoRoot, "mutants", "*.mutant"))
	if err != nil || len(patches) == 0 {
		t.Fatalf("no mutants found: %v", err)
	}
	for _, p := range patches {
		if !strings.Contains(doc, "(../mutants/"+filepath.Base(p)+")") {
			t.Errorf("docs/guarantees.md does not link mutant %s", filepath.Base(p))
		}
	}
	defined := map[string]bool{}
	funcRE := regexp.MustCompile(`(?m)^func ((?:Test|Fuzz)[A-Za-z0-9_]+)\(`)
	err = filepath.WalkDir(repoRoot, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "node_modules") {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(p, "_test.go") {
			src, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			for _, m := range funcRE.FindAllStringSubmatch(string(src), -1) {
				defined[m[1]] = true
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	named := regexp.MustCompile("`((?:Test|Fuzz)[A-Za-z0-9_]+)`").FindAllStringSubmatch(doc, -1)
	if len(named) < 20 {
		t.Fatalf("docs/guarantees.md names %d tests; is the pattern stale?", len(named))
	}
	for _, m := range named {
		if !defined[m[1]] {
			t.Errorf("docs/guarantees.md names %s, which no _test.go file defines", m[1])
		}
	}
}

// TestDocsSize: the README stays a front page (at most 12,000 characters,
// topics go to docs/) and the benchmarks page one page (250 lines).
func TestDocsSize(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(repoRoot, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	if n := utf8.RuneCount(b); n > 12000 {
		t.Errorf("README.md has %d characters, over 12,000: move detail to a docs/ page and link it", n)
	}
	b, err = os.ReadFile(filepath.Join(repoRoot, "docs/benchmarks.md"))
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(b), "\n"); n > 250 {
		t.Errorf("docs/benchmarks.md has %d lines, over 250: keep the current figures, history lives in git", n)
	}
}

// TestNoHistoryInDocs: the docs describe the current product. Issue
// numbers, commit hashes and the internal design contract's name belong in
// commit bodies and CHANGELOG.md, not in the README, docs/ or Go comments.
func TestNoHistoryInDocs(t *testing.T) {
	issueRE := regexp.MustCompile(`(?i)\bissue #?[0-9]+|\bDESIGN\.md\b|\bDESIGN §`)
	hashRE := regexp.MustCompile(`\b[0-9a-f]{7,40}\b`)
	isHash := func(s string) bool {
		return strings.ContainsAny(s, "abcdef") && strings.ContainsAny(s, "0123456789")
	}
	for _, page := range docPages(t) {
		b, err := os.ReadFile(filepath.Join(repoRoot, page))
		if err != nil {
			t.Fatal(err)
		}
		for i, line := range strings.Split(string(b), "\n") {
			if m := issueRE.FindString(line); m != "" {
				t.Errorf("%s:%d: %q: history belongs in git and CHANGELOG.md", page, i+1, m)
			}
			for _, h := range hashRE.FindAllString(line, -1) {
				if isHash(h) {
					t.Errorf("%s:%d: %q looks like a commit hash", page, i+1, h)
				}
			}
		}
	}
	commentRE := regexp.MustCompile(`//.*`)
	err := filepath.WalkDir(repoRoot, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "testdata" || d.Name() == "node_modules") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(p, ".go") {
			return nil
		}
		src, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		for i, line := range strings.Split(string(src), "\n") {
			if m := issueRE.FindString(commentRE.FindString(line)); m != "" {
				t.Errorf("%s:%d: %q in a comment: keep the rationale, link a docs page", p, i+1, m)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestAlertRunbooks: every alert of the chart's PrometheusRule has a
// runbook, a "### <alert>" heading in docs/operations.md, and the page
// names no alert the chart does not have.
func TestAlertRunbooks(t *testing.T) {
	rule, err := os.ReadFile(filepath.Join(repoRoot, "charts/kdelay/templates/prometheusrule.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	doc, err := os.ReadFile(filepath.Join(repoRoot, "docs/operations.md"))
	if err != nil {
		t.Fatal(err)
	}
	alerts := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^\s*- alert: (\w+)`).FindAllStringSubmatch(string(rule), -1) {
		alerts[m[1]] = true
		if !strings.Contains(string(doc), "\n### "+m[1]+"\n") {
			t.Errorf("docs/operations.md has no runbook \"### %s\"", m[1])
		}
	}
	if len(alerts) < 5 {
		t.Fatalf("found %d alerts in the PrometheusRule; is the pattern stale?", len(alerts))
	}
	for _, m := range regexp.MustCompile(`(?m)^### (Kdelay\w+)$`).FindAllStringSubmatch(string(doc), -1) {
		if !alerts[m[1]] {
			t.Errorf("docs/operations.md has a runbook for %s, which the PrometheusRule does not define", m[1])
		}
	}
}
