package chartcheck

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	yamlv3 "go.yaml.in/yaml/v3"
)

const (
	readmeStart = "<!-- values:start (generated from values.yaml by charts/chartcheck; UPDATE_README=1 go test ./... to refresh) -->"
	readmeEnd   = "<!-- values:end -->"
)

// valueDoc is one documented value of values.yaml.
type valueDoc struct {
	key, typ, def, desc string
}

// docComment returns the "# --" description in a key's head comment (the
// paragraph right above the key), or "" when there is none.
func docComment(head string) string {
	paras := strings.Split(strings.TrimSpace(head), "\n\n")
	last := paras[len(paras)-1]
	var desc []string
	in := false
	for _, line := range strings.Split(last, "\n") {
		line = strings.TrimSpace(line)
		switch {
		case strings.HasPrefix(line, "# --"):
			in = true
			desc = append(desc, strings.TrimSpace(strings.TrimPrefix(line, "# --")))
		case in && strings.HasPrefix(line, "#"):
			desc = append(desc, strings.TrimSpace(strings.TrimPrefix(line, "#")))
		}
	}
	return strings.Join(desc, " ")
}

func yamlType(n *yamlv3.Node) string {
	switch n.Kind {
	case yamlv3.MappingNode:
		return "object"
	case yamlv3.SequenceNode:
		return "list"
	case yamlv3.AliasNode:
		return yamlType(n.Alias)
	}
	switch n.Tag {
	case "!!int":
		return "int"
	case "!!bool":
		return "bool"
	case "!!float":
		return "float"
	case "!!null":
		return "null"
	}
	return "string"
}

func hasDocumentedDescendant(n *yamlv3.Node) bool {
	if n.Kind != yamlv3.MappingNode {
		return false
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if docComment(n.Content[i].HeadComment) != "" || hasDocumentedDescendant(n.Content[i+1]) {
			return true
		}
	}
	return false
}

// collectValueDocs walks values.yaml. A documented key becomes a row unless
// it is a map with documented keys below it (then those are the rows). A
// leaf that neither it nor an ancestor documents is an error.
func collectValueDocs(n *yamlv3.Node, prefix string, documented bool, rows *[]valueDoc, missing *[]string) error {
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		key := k.Value
		if prefix != "" {
			key = prefix + "." + key
		}
		desc := docComment(k.HeadComment)
		descend := v.Kind == yamlv3.MappingNode && len(v.Content) > 0 && hasDocumentedDescendant(v)
		if desc != "" && !descend {
			var val any
			if err := v.Decode(&val); err != nil {
				return fmt.Errorf("%s: %v", key, err)
			}
			def, err := json.Marshal(val)
			if err != nil {
				return fmt.Errorf("%s: %v", key, err)
			}
			*rows = append(*rows, valueDoc{key, yamlType(v), string(def), desc})
			continue
		}
		if v.Kind == yamlv3.MappingNode && len(v.Content) > 0 {
			if err := collectValueDocs(v, key, documented || desc != "", rows, missing); err != nil {
				return err
			}
			continue
		}
		if desc == "" && !documented {
			*missing = append(*missing, key)
		}
	}
	return nil
}

func valuesTable(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(chartDir, "values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var doc yamlv3.Node
	if err := yamlv3.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	if doc.Kind != yamlv3.DocumentNode || len(doc.Content) != 1 || doc.Content[0].Kind != yamlv3.MappingNode {
		t.Fatal("values.yaml is not a mapping")
	}
	var rows []valueDoc
	var missing []string
	if err := collectValueDocs(doc.Content[0], "", false, &rows, &missing); err != nil {
		t.Fatal(err)
	}
	if len(missing) > 0 {
		t.Errorf("values without a \"# --\" comment: %s", strings.Join(missing, ", "))
	}
	var buf bytes.Buffer
	buf.WriteString("| Key | Type | Default | Description |\n|-----|------|---------|-------------|\n")
	cell := func(s string) string { return strings.ReplaceAll(s, "|", `\|`) }
	for _, r := range rows {
		fmt.Fprintf(&buf, "| %s | %s | `%s` | %s |\n", r.key, r.typ, cell(r.def), cell(r.desc))
	}
	return buf.String()
}

// TestReadmeValues checks that README.md documents every value exactly as the
// "# --" comments of values.yaml say. UPDATE_README=1 rewrites the table.
func TestReadmeValues(t *testing.T) {
	table := valuesTable(t)
	path := filepath.Join(chartDir, "README.md")
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	readme := string(b)
	start := strings.Index(readme, readmeStart)
	end := strings.Index(readme, readmeEnd)
	if start < 0 || end < start {
		t.Fatalf("%s lacks the markers %q and %q", path, readmeStart, readmeEnd)
	}
	current := readme[start+len(readmeStart) : end]
	want := "\n" + table
	if current == want {
		return
	}
	if os.Getenv("UPDATE_README") != "" {
		updated := readme[:start+len(readmeStart)] + want + readme[end:]
		if err := os.WriteFile(path, []byte(updated), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("rewrote the values table of %s", path)
		return
	}
	t.Errorf("the values table in %s is out of date; run `UPDATE_README=1 go test ./...` in charts/chartcheck", path)
}
