package chartcheck

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	serializerjson "k8s.io/apimachinery/pkg/runtime/serializer/json"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

const (
	chartDir     = "../kdelay"
	allOnValues  = "../kdelay/ci/all-on-values.yaml"
	releaseName  = "demo"
	releaseNS    = "kdelay-test"
	fullname     = "demo-kdelay"
	helmInstall  = "go install helm.sh/helm/v3/cmd/helm@v3.22.0"
	kdelayMount  = "/data"
	defaultImage = "ghcr.io/kdelay/kdelay"
	// kubeVersion is the Kubernetes version the chart is rendered for:
	// helm template assumes v1.20 otherwise, below the chart's kubeVersion.
	kubeVersion = "1.32.0"
)

var (
	helmOnce sync.Once
	helmPath string
	helmErr  error
)

// helm returns the path of the helm binary: from PATH, else from
// $(go env GOPATH)/bin. Without helm the test is skipped, or fails when CI=true.
func helm(t *testing.T) string {
	t.Helper()
	helmOnce.Do(func() {
		if p, err := exec.LookPath("helm"); err == nil {
			helmPath = p
			return
		}
		out, err := exec.Command("go", "env", "GOPATH").Output()
		if err == nil {
			for _, dir := range filepath.SplitList(strings.TrimSpace(string(out))) {
				p := filepath.Join(dir, "bin", "helm")
				if st, err := os.Stat(p); err == nil && !st.IsDir() {
					helmPath = p
					return
				}
			}
		}
		helmErr = errors.New("helm not found on PATH nor in $(go env GOPATH)/bin; install it with `" + helmInstall + "` (charts/check.sh does this)")
	})
	if helmErr != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal(helmErr)
		}
		t.Skip(helmErr)
	}
	return helmPath
}

// runHelm runs helm with args and returns stdout, or stderr in the error.
func runHelm(t *testing.T, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command(helm(t), args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("helm %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return stdout.String(), nil
}

// renderArgs builds the `helm template` arguments for a values file (may be
// empty) and --set expressions.
func renderArgs(chart, valuesFile string, sets ...string) []string {
	args := []string{"template", releaseName, chart, "--namespace", releaseNS, "--kube-version", kubeVersion}
	if valuesFile != "" {
		args = append(args, "-f", valuesFile)
	}
	for _, s := range sets {
		args = append(args, "--set", s)
	}
	return args
}

// manifests is a rendered chart decoded into typed objects.
type manifests struct {
	raw          string
	statefulSets []*appsv1.StatefulSet
	services     []*corev1.Service
	secrets      []*corev1.Secret
	configMaps   []*corev1.ConfigMap
	accounts     []*corev1.ServiceAccount
	jobs         []*batchv1.Job
	pdbs         []*policyv1.PodDisruptionBudget
	netpols      []*networkingv1.NetworkPolicy
	pods         []*corev1.Pod                // the helm test pod
	deployments  []*appsv1.Deployment         // the console
	other        []*unstructured.Unstructured // kinds without Go types here (ServiceMonitor)
}

var (
	scheme  = runtime.NewScheme()
	decoder *serializerjson.Serializer
)

func init() {
	for _, add := range []func(*runtime.Scheme) error{
		corev1.AddToScheme, appsv1.AddToScheme, batchv1.AddToScheme, policyv1.AddToScheme, networkingv1.AddToScheme,
	} {
		if err := add(scheme); err != nil {
			panic(err)
		}
	}
	// Strict: unknown or duplicate fields are errors, so a misspelt field in a
	// template fails here instead of being silently dropped by the API server.
	decoder = serializerjson.NewSerializerWithOptions(serializerjson.DefaultMetaFactory, scheme, scheme,
		serializerjson.SerializerOptions{Yaml: true, Strict: true})
}

// render runs `helm template` and decodes every document.
func render(t *testing.T, valuesFile string, sets ...string) *manifests {
	t.Helper()
	out, err := runHelm(t, renderArgs(chartDir, valuesFile, sets...)...)
	if err != nil {
		t.Fatal(err)
	}
	m, err := decodeAll(out)
	if err != nil {
		t.Fatalf("decoding rendered manifests: %v\n%s", err, out)
	}
	return m
}

func decodeAll(out string) (*manifests, error) {
	m := &manifests{raw: out}
	r := utilyaml.NewYAMLReader(bufio.NewReader(strings.NewReader(out)))
	for i := 0; ; i++ {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, err
		}
		var probe map[string]any
		if err := yaml.Unmarshal(doc, &probe); err != nil {
			return nil, fmt.Errorf("document %d: %v", i, err)
		}
		if len(probe) == 0 {
			continue // comment-only or empty document
		}
		apiVersion, _ := probe["apiVersion"].(string)
		kind, _ := probe["kind"].(string)
		if apiVersion == "" || kind == "" {
			return nil, fmt.Errorf("document %d has no apiVersion/kind:\n%s", i, doc)
		}
		if apiVersion == "monitoring.coreos.com/v1" {
			m.other = append(m.other, &unstructured.Unstructured{Object: probe})
			continue
		}
		obj, _, err := decoder.Decode(doc, nil, nil)
		if err != nil {
			return nil, fmt.Errorf("document %d (%s %s): %v", i, apiVersion, kind, err)
		}
		switch o := obj.(type) {
		case *appsv1.StatefulSet:
			m.statefulSets = append(m.statefulSets, o)
		case *corev1.Service:
			m.services = append(m.services, o)
		case *corev1.Secret:
			m.secrets = append(m.secrets, o)
		case *corev1.ConfigMap:
			m.configMaps = append(m.configMaps, o)
		case *corev1.ServiceAccount:
			m.accounts = append(m.accounts, o)
		case *batchv1.Job:
			m.jobs = append(m.jobs, o)
		case *policyv1.PodDisruptionBudget:
			m.pdbs = append(m.pdbs, o)
		case *networkingv1.NetworkPolicy:
			m.netpols = append(m.netpols, o)
		case *corev1.Pod:
			m.pods = append(m.pods, o)
		case *appsv1.Deployment:
			m.deployments = append(m.deployments, o)
		default:
			return nil, fmt.Errorf("document %d: unexpected kind %T", i, obj)
		}
	}
	return m, nil
}

func (m *manifests) statefulSet(t *testing.T) *appsv1.StatefulSet {
	t.Helper()
	if len(m.statefulSets) != 1 {
		t.Fatalf("want 1 StatefulSet, got %d", len(m.statefulSets))
	}
	return m.statefulSets[0]
}

func (m *manifests) service(t *testing.T, name string) *corev1.Service {
	t.Helper()
	for _, s := range m.services {
		if s.Name == name {
			return s
		}
	}
	t.Fatalf("no Service %q", name)
	return nil
}

func (m *manifests) secret(name string) *corev1.Secret {
	for _, s := range m.secrets {
		if s.Name == name {
			return s
		}
	}
	return nil
}

func container(t *testing.T, spec *corev1.PodSpec, name string) *corev1.Container {
	t.Helper()
	for i := range spec.Containers {
		if spec.Containers[i].Name == name {
			return &spec.Containers[i]
		}
	}
	t.Fatalf("no container %q", name)
	return nil
}

func envMap(c *corev1.Container) map[string]string {
	env := map[string]string{}
	for _, e := range c.Env {
		env[e.Name] = e.Value
	}
	return env
}

func volume(spec *corev1.PodSpec, name string) *corev1.Volume {
	for i := range spec.Volumes {
		if spec.Volumes[i].Name == name {
			return &spec.Volumes[i]
		}
	}
	return nil
}

func mount(c *corev1.Container, name string) *corev1.VolumeMount {
	for i := range c.VolumeMounts {
		if c.VolumeMounts[i].Name == name {
			return &c.VolumeMounts[i]
		}
	}
	return nil
}

// selects reports whether selector (matchLabels semantics) selects labels.
func selects(selector, labels map[string]string) bool {
	if len(selector) == 0 {
		return false
	}
	for k, v := range selector {
		if labels[k] != v {
			return false
		}
	}
	return true
}
