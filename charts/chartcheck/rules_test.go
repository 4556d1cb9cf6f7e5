package chartcheck

import (
	"encoding/json"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// pendingMetrics are metrics the alerts use that relay/metrics.go does not
// register yet (none today).
var pendingMetrics = []string{}

// codeMetrics returns the metric names relay/metrics.go registers: the
// Name of each client_golang option struct and the name given to each
// batchHistogram (relay/histogram.go).
func codeMetrics(t *testing.T) []string {
	t.Helper()
	src, err := os.ReadFile("../../relay/metrics.go")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, m := range regexp.MustCompile(`(?:Name:\s*|newBatchHistogram\()"(kdelay_[a-z_]+)"`).FindAllStringSubmatch(string(src), -1) {
		out = append(out, m[1])
	}
	if len(out) < 10 {
		t.Fatalf("found %d metric names in relay/metrics.go; the pattern is stale", len(out))
	}
	return out
}

// checkMetricNames fails for every kdelay_* series of exprs that the code
// does not export (histogram series _bucket/_sum/_count count as theirs).
func checkMetricNames(t *testing.T, what string, exprs []string) {
	t.Helper()
	known := codeMetrics(t)
	for _, e := range exprs {
		for _, name := range regexp.MustCompile(`kdelay_[a-z_]+`).FindAllString(e, -1) {
			base := strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(name, "_bucket"), "_sum"), "_count")
			if !slices.Contains(known, name) && !slices.Contains(known, base) && !slices.Contains(pendingMetrics, name) {
				t.Errorf("%s uses %s, which relay/metrics.go does not register: %s", what, name, e)
			}
		}
	}
}

func checkPrometheusRule(t *testing.T, m *manifests) {
	t.Helper()
	var rule *unstructured.Unstructured
	for _, o := range m.other {
		if o.GetKind() == "PrometheusRule" {
			rule = o
		}
	}
	if rule == nil {
		t.Fatal("no PrometheusRule with prometheusRule.enabled")
	}
	if rule.GetNamespace() != "monitoring" || rule.GetLabels()["release"] != "prometheus" {
		t.Errorf("PrometheusRule metadata: namespace %q labels %v", rule.GetNamespace(), rule.GetLabels())
	}
	raw, _ := json.Marshal(rule.Object["spec"])
	var spec struct {
		Groups []struct {
			Rules []struct {
				Alert  string            `json:"alert"`
				Expr   string            `json:"expr"`
				For    string            `json:"for"`
				Labels map[string]string `json:"labels"`
			} `json:"rules"`
		} `json:"groups"`
	}
	if err := json.Unmarshal(raw, &spec); err != nil || len(spec.Groups) != 1 {
		t.Fatalf("PrometheusRule spec: %v\n%s", err, raw)
	}
	alerts := map[string]string{}
	var exprs []string
	for _, r := range spec.Groups[0].Rules {
		alerts[r.Alert] = r.Expr
		exprs = append(exprs, r.Expr)
		if r.Alert != "KdelayCustom" && (r.Labels["severity"] == "" || r.Labels["team"] != "payments") {
			t.Errorf("alert %s labels = %v, want a severity and the alertLabels", r.Alert, r.Labels)
		}
		if r.Alert != "KdelayCustom" && !strings.Contains(r.Expr, `namespace="`+releaseNS+`",job="`+fullname+`"`) {
			t.Errorf("alert %s does not select this release's series: %s", r.Alert, r.Expr)
		}
	}
	for name, want := range map[string]string{
		"KdelayNotReady":       "kdelay_ready{",
		"KdelayStalled":        "kdelay_stalled{",
		"KdelayProduceRetries": "sum by (namespace, pod, reason) (rate(kdelay_produce_retries_total{",
		"KdelayDeadLetters":    "increase(kdelay_records_dead_lettered_total{",
		"KdelayLatenessHigh":   "histogram_quantile(0.99, sum by (namespace, level, le) (rate(kdelay_lateness_seconds_bucket{",
		"KdelayOverdue":        "kdelay_next_due_timestamp_seconds{",
		"KdelayCustom":         "vector(0) > 1",
	} {
		if !strings.Contains(alerts[name], want) {
			t.Errorf("alert %s = %q, want it to contain %q", name, alerts[name], want)
		}
	}
	if !strings.HasSuffix(alerts["KdelayLatenessHigh"], "> 2") || !strings.HasSuffix(alerts["KdelayOverdue"], "> 30") {
		t.Errorf("thresholds not from values: %q, %q", alerts["KdelayLatenessHigh"], alerts["KdelayOverdue"])
	}
	if !strings.Contains(alerts["KdelayOverdue"], "> 0)") {
		t.Errorf("KdelayOverdue does not leave out idle levels (exported as 0): %s", alerts["KdelayOverdue"])
	}
	if _, ok := alerts["KdelayConsumerLagHigh"]; ok {
		t.Error("KdelayConsumerLagHigh rendered although prometheusRule.disabled lists it")
	}
	checkMetricNames(t, "PrometheusRule", exprs)

	// The lag alert, when on, takes its threshold from the values.
	m2 := render(t, "", "prometheusRule.enabled=true", "prometheusRule.consumerLagThreshold=1234")
	if len(m2.other) != 1 || !strings.Contains(m2.raw, "(kdelay_consumer_lag{namespace=\""+releaseNS+"\",job=\""+fullname+"\"}) > 1234") {
		t.Errorf("default PrometheusRule lacks the consumer lag alert with threshold 1234")
	}
}

func checkNetworkPolicy(t *testing.T, m *manifests, sts *appsv1.StatefulSet) {
	t.Helper()
	if len(m.netpols) != 1 {
		t.Fatalf("NetworkPolicies = %d, want 1", len(m.netpols))
	}
	np := m.netpols[0]
	if !selects(np.Spec.PodSelector.MatchLabels, sts.Spec.Template.Labels) {
		t.Errorf("NetworkPolicy selects %v, not the pods %v", np.Spec.PodSelector.MatchLabels, sts.Spec.Template.Labels)
	}
	// From metricsFrom and from the helm test pod.
	if len(np.Spec.Ingress) != 1 || np.Spec.Ingress[0].Ports[0].Port.String() != "http" || len(np.Spec.Ingress[0].From) != 2 ||
		np.Spec.Ingress[0].From[0].NamespaceSelector == nil {
		t.Errorf("NetworkPolicy ingress = %+v, want the http port from metricsFrom and the test pod", np.Spec.Ingress)
	} else if len(m.pods) != 1 || np.Spec.Ingress[0].From[1].PodSelector == nil ||
		!selects(np.Spec.Ingress[0].From[1].PodSelector.MatchLabels, m.pods[0].Labels) {
		t.Errorf("NetworkPolicy ingress does not admit the helm test pod: %+v", np.Spec.Ingress[0].From)
	}
	var kafka bool
	for _, e := range np.Spec.Egress {
		for _, p := range e.Ports {
			if p.Port.IntValue() == 9093 && len(e.To) == 1 && e.To[0].IPBlock != nil {
				kafka = true
			}
		}
	}
	if !kafka {
		t.Errorf("NetworkPolicy egress = %+v, want port 9093 to the kafkaTo ipBlock", np.Spec.Egress)
	}
}

// checkEveryVariable: with every option on, the chart sets every variable
// the binary reads (config/config.go), but for the plain SASL password,
// which comes from a mounted file.
func checkEveryVariable(t *testing.T, env map[string]string) {
	t.Helper()
	src, err := os.ReadFile("../../config/config.go")
	if err != nil {
		t.Fatal(err)
	}
	names := regexp.MustCompile("`env:\"([A-Z_]+)").FindAllStringSubmatch(string(src), -1)
	if len(names) < 20 {
		t.Fatalf("found %d variables in config/config.go; the pattern is stale", len(names))
	}
	for _, n := range names {
		name := "KDELAY_" + n[1]
		if name == "KDELAY_SASL_PASSWORD" {
			if _, ok := env[name]; ok {
				t.Error("KDELAY_SASL_PASSWORD set as a plain value")
			}
			continue
		}
		if _, ok := env[name]; !ok {
			t.Errorf("the chart cannot set %s (no value renders it)", name)
		}
	}
}

func TestPDBOnlyWithReplicas(t *testing.T) {
	if m := render(t, "", "replicaCount=1"); len(m.pdbs) != 0 {
		t.Errorf("PDB rendered with one replica: it would block every drain")
	}
	if m := render(t, "", "replicaCount=3"); len(m.pdbs) != 1 {
		t.Errorf("PDBs = %d with 3 replicas, want 1 (on by default)", len(m.pdbs))
	}
	if m := render(t, "", "podDisruptionBudget.enabled=false"); len(m.pdbs) != 0 {
		t.Errorf("PDB rendered although disabled")
	}
}

func TestOptionalValues(t *testing.T) {
	m := render(t, "", "config.staticMembership=false", "goMemLimitRatio=0", "config.wheelHorizon=20m", "topologySpreadConstraints=null")
	sts, c := checkCommon(t, m)
	env := envMap(c)
	for _, k := range []string{"KDELAY_INSTANCE_ID", "GOMEMLIMIT"} {
		if _, ok := env[k]; ok {
			t.Errorf("%s set although turned off", k)
		}
	}
	if env["KDELAY_WHEEL_HORIZON"] != "20m" {
		t.Errorf("KDELAY_WHEEL_HORIZON = %q, want 20m", env["KDELAY_WHEEL_HORIZON"])
	}
	if n := len(sts.Spec.Template.Spec.TopologySpreadConstraints); n != 0 {
		t.Errorf("%d topology spread constraints, want none", n)
	}
	// Decimal suffixes and fractions convert too.
	for limit, want := range map[string]string{"1G": "900000000", "1.5Gi": "1449551462"} {
		_, c = checkCommon(t, render(t, "", "resources.limits.memory="+limit))
		if got := envMap(c)["GOMEMLIMIT"]; got != want {
			t.Errorf("GOMEMLIMIT = %q for a %s limit, want %s (0.9 of it)", got, limit, want)
		}
	}
}
