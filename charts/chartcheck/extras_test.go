package chartcheck

import (
	"slices"
	"strconv"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// checkTestPod verifies the `helm test` pod: a test hook running image that
// GETs /readyz through the metrics Service, hardened as the kdelay pods, and
// never taken for a kdelay pod.
func checkTestPod(t *testing.T, m *manifests, sts *appsv1.StatefulSet, image string) {
	t.Helper()
	if len(m.pods) != 1 {
		t.Fatalf("Pods = %d, want the helm test pod", len(m.pods))
	}
	p := m.pods[0]
	if p.Annotations["helm.sh/hook"] != "test" {
		t.Errorf("test pod hook = %q, want test", p.Annotations["helm.sh/hook"])
	}
	if p.Spec.RestartPolicy != corev1.RestartPolicyNever {
		t.Errorf("test pod restartPolicy = %q, want Never", p.Spec.RestartPolicy)
	}
	if len(p.Spec.Containers) != 1 {
		t.Fatalf("test pod containers = %d, want 1", len(p.Spec.Containers))
	}
	c := p.Spec.Containers[0]
	if c.Image != image {
		t.Errorf("test pod image = %q, want %q", c.Image, image)
	}
	if strings.HasSuffix(c.Image, ":latest") || !strings.Contains(c.Image, ":") {
		t.Errorf("test pod image %q is not pinned to a tag", c.Image)
	}
	metrics := m.service(t, fullname)
	url := "http://" + metrics.Name + "." + metrics.Namespace + ".svc:" + strconv.Itoa(int(metrics.Spec.Ports[0].Port)) + "/readyz"
	script := strings.Join(append(slices.Clone(c.Command), c.Args...), " ")
	if !strings.Contains(script, "url="+url+"\n") || !strings.Contains(script, `wget -q -T 5 -O - "$url"`) || !strings.Contains(script, "exit 1") {
		t.Errorf("test pod does not GET %s through the Service (or never fails):\n%s", url, script)
	}
	sc := c.SecurityContext
	if p.Spec.SecurityContext.String() != sts.Spec.Template.Spec.SecurityContext.String() ||
		sc == nil || sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
		t.Errorf("test pod is not hardened as the kdelay pods: %+v %+v", p.Spec.SecurityContext, sc)
	}
	if p.Spec.AutomountServiceAccountToken == nil || *p.Spec.AutomountServiceAccountToken {
		t.Error("test pod mounts a ServiceAccount token")
	}
	for _, s := range m.services {
		if selects(s.Spec.Selector, p.Labels) {
			t.Errorf("Service %s selects the test pod", s.Name)
		}
	}
	for _, pdb := range m.pdbs {
		if selects(pdb.Spec.Selector.MatchLabels, p.Labels) {
			t.Errorf("PodDisruptionBudget %s selects the test pod", pdb.Name)
		}
	}
}

func TestHelmTestDisabled(t *testing.T) {
	m := render(t, "", "test.enabled=false")
	checkCommon(t, m)
	if len(m.pods) != 0 {
		t.Errorf("test pod rendered with test.enabled=false")
	}
}

// checkExtraObjects: ci/all-on-values.yaml holds one extra object as a map
// and one as a template string.
func checkExtraObjects(t *testing.T, m *manifests) {
	t.Helper()
	byName := map[string]*corev1.ConfigMap{}
	for _, c := range m.configMaps {
		byName[c.Name] = c
	}
	if c := byName["kdelay-extra-object"]; c == nil || c.Data["kind"] != "object" {
		t.Errorf("extraObjects map item not rendered: %+v", c)
	}
	c := byName[fullname+"-extra-template"]
	if c == nil || c.Data["kind"] != "template" || c.Namespace != releaseNS ||
		c.Data["brokers"] != "kafka-0.kafka:9093,kafka-1.kafka:9093,kafka-2.kafka:9093" || c.Labels["app.kubernetes.io/instance"] != releaseName {
		t.Errorf("extraObjects template item not rendered through tpl: %+v", c)
	}
}

// TestNamespaceOverride: every object goes to namespaceOverride but those
// with their own namespace value, and whatever names the release's
// namespace follows it.
func TestNamespaceOverride(t *testing.T) {
	const ns = "delays"
	m := render(t, allOnValues, "namespaceOverride="+ns)
	sts, _ := checkCommon(t, m)
	own := map[string]bool{ // objects placed by their own values
		"ServiceMonitor/" + fullname:           true,
		"PrometheusRule/" + fullname:           true,
		"ConfigMap/" + fullname + "-dashboard": true,
		"ConfigMap/kdelay-extra-object":        true,
	}
	for _, o := range m.objects() {
		if own[o.kind+"/"+o.GetName()] {
			continue
		}
		if o.GetNamespace() != ns {
			t.Errorf("%s %s in namespace %q, want %q", o.kind, o.GetName(), o.GetNamespace(), ns)
		}
	}
	for _, o := range m.other {
		switch o.GetKind() {
		case "ServiceMonitor":
			got, _, _ := unstructured.NestedStringSlice(o.Object, "spec", "namespaceSelector", "matchNames")
			if !slices.Equal(got, []string{ns}) {
				t.Errorf("ServiceMonitor namespaceSelector = %v, want [%s]", got, ns)
			}
		case "PrometheusRule":
			if !strings.Contains(m.raw, `kdelay_ready{namespace="`+ns+`",job="`+fullname+`"}`) {
				t.Errorf("PrometheusRule does not select the series of namespace %s", ns)
			}
		}
	}
	checkTestPod(t, m, sts, "registry.example.com/tools/busybox:1.37.0")
}
