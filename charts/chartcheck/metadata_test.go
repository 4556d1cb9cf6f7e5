package chartcheck

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// chartMeta is the part of Chart.yaml that Artifact Hub and helm show.
type chartMeta struct {
	Home        string   `json:"home"`
	Sources     []string `json:"sources"`
	Version     string   `json:"version"`
	AppVersion  string   `json:"appVersion"`
	KubeVersion string   `json:"kubeVersion"`
	Maintainers []struct {
		Name string `json:"name"`
		URL  string `json:"url"`
	} `json:"maintainers"`
	Annotations map[string]string `json:"annotations"`
}

// TestChartMetadata checks Chart.yaml as a packaged, published chart needs
// it: home, sources, maintainers, kubeVersion and the Artifact Hub
// annotations, in agreement with the repository's LICENSE, CHANGELOG.md and
// the chart's default images.
func TestChartMetadata(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(chartDir, "Chart.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var c chartMeta
	if err := yaml.Unmarshal(b, &c); err != nil {
		t.Fatal(err)
	}
	const repo = "https://github.com/kdelay/kdelay"
	if c.Home != repo || !slices.Contains(c.Sources, repo) {
		t.Errorf("home = %q, sources = %v; want %s in both", c.Home, c.Sources, repo)
	}
	if len(c.Maintainers) == 0 || c.Maintainers[0].Name == "" || c.Maintainers[0].URL == "" {
		t.Errorf("maintainers = %+v, want a name and a URL", c.Maintainers)
	}
	if !regexp.MustCompile(`^>=1\.\d+\.\d+-0$`).MatchString(c.KubeVersion) {
		t.Errorf("kubeVersion = %q, want a lower bound such as >=1.27.0-0", c.KubeVersion)
	}

	// The licence: Artifact Hub's SPDX id is the repository's LICENSE.
	lic, err := os.ReadFile("../../LICENSE")
	if err != nil {
		t.Fatal(err)
	}
	if c.Annotations["artifacthub.io/license"] != "Apache-2.0" || !strings.Contains(string(lic), "Apache License\n                           Version 2.0, January 2004") {
		t.Errorf("artifacthub.io/license = %q; LICENSE is not the Apache License 2.0 text", c.Annotations["artifacthub.io/license"])
	}
	if c.Annotations["artifacthub.io/links"] == "" || c.Annotations["artifacthub.io/category"] == "" {
		t.Errorf("Artifact Hub links or category missing: %v", c.Annotations)
	}

	// The images Artifact Hub lists are the ones the chart runs by default.
	var images []struct {
		Name  string `json:"name"`
		Image string `json:"image"`
	}
	if err := yaml.Unmarshal([]byte(c.Annotations["artifacthub.io/images"]), &images); err != nil {
		t.Fatalf("artifacthub.io/images: %v", err)
	}
	var listed []string
	for _, im := range images {
		listed = append(listed, im.Image)
	}
	m := render(t, "")
	want := []string{container(t, &m.statefulSet(t).Spec.Template.Spec, "kdelay").Image}
	for _, p := range m.pods {
		for _, pc := range p.Spec.Containers {
			want = append(want, pc.Image)
		}
	}
	slices.Sort(listed)
	slices.Sort(want)
	if !slices.Equal(listed, want) {
		t.Errorf("artifacthub.io/images = %v, want the default images %v", listed, want)
	}

	// appVersion is the newest release of CHANGELOG.md.
	cl, err := os.ReadFile("../../CHANGELOG.md")
	if err != nil {
		t.Fatal(err)
	}
	rel := regexp.MustCompile(`(?m)^## \[?(\d+\.\d+\.\d+)\]? - \d{4}-\d{2}-\d{2}$`).FindStringSubmatch(string(cl))
	if rel == nil {
		t.Fatal("CHANGELOG.md has no released section `## X.Y.Z - YYYY-MM-DD`")
	}
	if c.AppVersion != rel[1] {
		t.Errorf("appVersion = %q, want the newest release in CHANGELOG.md, %s", c.AppVersion, rel[1])
	}
}

// TestValuesSchemaModeline: editors validate values.yaml against the schema.
func TestValuesSchemaModeline(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(chartDir, "values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	first, _, _ := strings.Cut(string(b), "\n")
	if first != "# yaml-language-server: $schema=values.schema.json" {
		t.Errorf("first line of values.yaml = %q, want the yaml-language-server schema modeline", first)
	}
}

// TestKubeVersion: the chart refuses a cluster older than its kubeVersion.
func TestKubeVersion(t *testing.T) {
	args := []string{"template", releaseName, chartDir, "--namespace", releaseNS, "--kube-version", "1.26.0"}
	if out, err := runHelm(t, args...); err == nil || !strings.Contains(err.Error(), "kubeVersion") {
		t.Errorf("rendering for Kubernetes 1.26 succeeded or failed for another reason: %v\n%.300s", err, out)
	}
}
