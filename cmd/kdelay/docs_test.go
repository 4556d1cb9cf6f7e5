package main

import (
	"io"
	"log/slog"
	"maps"
	"os"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/kdelay/kdelay/config"
	"github.com/kdelay/kdelay/relay"
)

// section returns the text of markdown heading "## title" up to the next
// "## " heading ("" if absent).
func section(doc, title string) string {
	_, rest, ok := strings.Cut(doc, "\n## "+title+"\n")
	if !ok {
		return ""
	}
	if i := strings.Index(rest, "\n## "); i >= 0 {
		rest = rest[:i]
	}
	return rest
}

// TestCLIDocMatchesFlags: docs/cli.md has a section per command, names
// each of its flags there (setting flags may be named in the settings
// section instead), and names no flag that no command has.
func TestCLIDocMatchesFlags(t *testing.T) {
	b, err := os.ReadFile("../../docs/cli.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	settings := section(doc, "Settings: flags and `KDELAY_*` variables")
	if settings == "" {
		t.Fatal("docs/cli.md has no settings section")
	}
	a := &app{environ: map[string]string{}, stdout: io.Discard, stderr: io.Discard}
	root := a.newRoot()
	all := map[string]bool{"help": true, "version": true}
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		if c.Hidden || c.Name() == "help" || c.Name() == "__complete" || c.Name() == "__completeNoDesc" {
			return
		}
		path := c.CommandPath()
		if c.Runnable() && !c.HasSubCommands() && c.Parent() != nil && c.Parent().Name() != "completion" {
			sec := section(doc, path)
			if sec == "" {
				t.Errorf("docs/cli.md has no section \"## %s\"", path)
			}
			c.LocalNonPersistentFlags().VisitAll(func(f *pflag.Flag) {
				all[f.Name] = true
				if f.Name == "help" {
					return
				}
				_, isSetting := f.Value.(*settingValue)
				if !strings.Contains(sec, "`--"+f.Name) && !(isSetting && strings.Contains(settings, "`--"+f.Name+"`")) {
					t.Errorf("docs/cli.md, section %s: flag --%s not documented", path, f.Name)
				}
			})
		}
		c.PersistentFlags().VisitAll(func(f *pflag.Flag) {
			all[f.Name] = true
			if !strings.Contains(settings, "`--"+f.Name+"`") {
				t.Errorf("docs/cli.md, settings section: flag --%s of every command not documented", f.Name)
			}
		})
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(root)
	for _, m := range regexp.MustCompile("(?m)(?:^|[\\s`(])--([a-z][a-z0-9-]+)").FindAllStringSubmatch(doc, -1) {
		if !all[m[1]] {
			t.Errorf("docs/cli.md names --%s, which no command has", m[1])
		}
	}
	// Every KDELAY_* variable is named in the docs.
	for _, name := range config.Names() {
		if !strings.Contains(doc, name) && !strings.Contains(doc, strings.TrimSuffix(name, "_FILE")) {
			t.Errorf("docs/cli.md does not name %s", name)
		}
	}
}

// descRecorder is a Registerer that records what is registered with it.
type descRecorder struct {
	prometheus.Registerer
	descs []string
}

func (r *descRecorder) Register(c prometheus.Collector) error {
	ch := make(chan *prometheus.Desc)
	go func() { c.Describe(ch); close(ch) }()
	for d := range ch {
		r.descs = append(r.descs, d.String())
	}
	return r.Registerer.Register(c)
}

func (r *descRecorder) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		if err := r.Register(c); err != nil {
			panic(err)
		}
	}
}

// registeredMetrics returns the kdelay_* metrics the relay registers (not
// franz-go's kdelay_kafka_* family), each with its sorted label names.
func registeredMetrics(t *testing.T) map[string][]string {
	t.Helper()
	// New checks the delay topic (binding.go): an in-process broker has it.
	_, addr := newCluster(t, kfake.SeedTopics(18, "delay-topic"), kfake.SeedTopics(1, "delay-topic.cancel"))
	cfg, err := config.Load(map[string]string{"KDELAY_DATA_DIR": t.TempDir(), "KDELAY_BROKERS": addr})
	if err != nil {
		t.Fatal(err)
	}
	rec := &descRecorder{Registerer: prometheus.NewRegistry()}
	r, err := relay.New(relay.Options{Config: cfg, Log: slog.New(slog.DiscardHandler), Registry: rec})
	if err != nil {
		t.Fatal(err)
	}
	r.Close()
	nameRE := regexp.MustCompile(`fqName: "([a-z0-9_]+)"`)
	labelsRE := regexp.MustCompile(`variableLabels: \{([a-z0-9_,]*)\}`)
	out := make(map[string][]string)
	for _, d := range rec.descs {
		m := nameRE.FindStringSubmatch(d)
		if m == nil {
			t.Fatalf("cannot read the name of %s", d)
		}
		if !strings.HasPrefix(m[1], "kdelay_") || strings.HasPrefix(m[1], "kdelay_kafka_") {
			continue
		}
		var labels []string
		if l := labelsRE.FindStringSubmatch(d); l != nil && l[1] != "" {
			labels = strings.Split(l[1], ",")
		}
		slices.Sort(labels)
		out[m[1]] = labels
	}
	if len(out) < 10 {
		t.Fatalf("found %d kdelay metrics; the Desc format changed? %v", len(out), rec.descs)
	}
	return out
}

// TestMetricsDocMatchesCode: the metrics table of docs/operations.md lists
// every metric the relay registers, with its labels, and no other.
func TestMetricsDocMatchesCode(t *testing.T) {
	b, err := os.ReadFile("../../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	code := registeredMetrics(t)
	docd := make(map[string][]string)
	rowRE := regexp.MustCompile("(?m)^\\| `(kdelay_[a-z_]+)(?:\\{([a-z_,]*)\\})?`")
	for _, m := range rowRE.FindAllStringSubmatch(string(b), -1) {
		var labels []string
		if m[2] != "" {
			labels = strings.Split(m[2], ",")
		}
		slices.Sort(labels)
		docd[m[1]] = labels
	}
	for _, name := range slices.Sorted(maps.Keys(code)) {
		got, ok := docd[name]
		switch {
		case !ok:
			t.Errorf("docs/operations.md: metric %s{%s} missing from the table", name, strings.Join(code[name], ","))
		case !slices.Equal(got, code[name]):
			t.Errorf("docs/operations.md: %s has labels {%s}, the code {%s}", name, strings.Join(got, ","), strings.Join(code[name], ","))
		}
	}
	for name := range docd {
		if _, ok := code[name]; !ok {
			t.Errorf("docs/operations.md documents %s, which the relay does not register", name)
		}
	}
	// Prose and queries name only metrics that exist.
	for _, m := range regexp.MustCompile(`kdelay_[a-z_]+`).FindAllString(string(b), -1) {
		base := strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(m, "_bucket"), "_sum"), "_count")
		if _, ok := code[base]; !ok && !strings.HasPrefix(m, "kdelay_kafka_") && m != "kdelay_" {
			t.Errorf("docs/operations.md names %s, which the relay does not register", m)
		}
	}
}

// TestConfigurationDocMatchesConfig: the settings table of
// docs/configuration.md has one row per variable config.Config reads, in
// the form | `KDELAY_X` | default | meaning |, with the envDefault tag as
// its default (in backquotes) where the field has one and a description
// where it has none, and no row for a variable nothing reads.
func TestConfigurationDocMatchesConfig(t *testing.T) {
	b, err := os.ReadFile("../../docs/configuration.md")
	if err != nil {
		t.Fatal(err)
	}
	table := section(string(b), "Settings")
	if table == "" {
		t.Fatal("docs/configuration.md has no \"## Settings\" section")
	}
	rowRE := regexp.MustCompile("(?m)^\\| `(KDELAY_[A-Z0-9_]+)` \\| (.*?) \\| (.*?) \\|$")
	type row struct{ def, meaning string }
	rows := map[string]row{}
	for _, m := range rowRE.FindAllStringSubmatch(table, -1) {
		if _, dup := rows[m[1]]; dup {
			t.Errorf("docs/configuration.md: %s has two rows", m[1])
		}
		rows[m[1]] = row{strings.TrimSpace(m[2]), strings.TrimSpace(m[3])}
	}
	typ := reflect.TypeFor[config.Config]()
	known := map[string]bool{}
	for i := range typ.NumField() {
		f := typ.Field(i)
		tag, _, _ := strings.Cut(f.Tag.Get("env"), ",")
		if tag == "" {
			continue
		}
		name := config.Prefix + tag
		known[name] = true
		r, ok := rows[name]
		switch {
		case !ok:
			t.Errorf("docs/configuration.md: no row for %s (config.Config.%s)", name, f.Name)
			continue
		case r.meaning == "":
			t.Errorf("docs/configuration.md: %s has no meaning", name)
		}
		if def, has := f.Tag.Lookup("envDefault"); has {
			if want := "`" + def + "`"; r.def != want {
				t.Errorf("docs/configuration.md: %s default is %s, config.Config says %s", name, r.def, want)
			}
		} else if r.def == "" {
			t.Errorf("docs/configuration.md: %s has no default column (say what happens when it is unset)", name)
		}
	}
	for name := range rows {
		if !known[name] {
			t.Errorf("docs/configuration.md documents %s, which config.Config does not read", name)
		}
	}
	if len(known) != len(config.Names()) {
		t.Errorf("config.Config has %d variables, config.Names() %d", len(known), len(config.Names()))
	}
}
