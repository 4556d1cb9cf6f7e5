package chartcheck

import (
	"encoding/json"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"
)

func chartAppVersion(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(chartDir, "Chart.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var c struct {
		AppVersion string `json:"appVersion"`
	}
	if err := yaml.Unmarshal(b, &c); err != nil {
		t.Fatal(err)
	}
	if c.AppVersion == "" {
		t.Fatal("Chart.yaml has no appVersion")
	}
	return c.AppVersion
}

func TestLint(t *testing.T) {
	for _, values := range []string{"", allOnValues} {
		args := []string{"lint", "--strict", chartDir}
		if values != "" {
			args = append(args, "-f", values)
		}
		if out, err := runHelm(t, args...); err != nil {
			t.Errorf("%v\n%s", err, out)
		}
	}
}

// checkCommon verifies what every rendering of the chart must satisfy.
func checkCommon(t *testing.T, m *manifests) (*appsv1.StatefulSet, *corev1.Container) {
	t.Helper()
	sts := m.statefulSet(t)
	pod := &sts.Spec.Template.Spec
	c := container(t, pod, "kdelay")
	env := envMap(c)

	if sts.Spec.PodManagementPolicy != appsv1.ParallelPodManagement {
		t.Errorf("podManagementPolicy = %q, want Parallel", sts.Spec.PodManagementPolicy)
	}
	if sts.Spec.Replicas == nil || *sts.Spec.Replicas < 1 {
		t.Errorf("replicas = %v", sts.Spec.Replicas)
	}
	if !selects(sts.Spec.Selector.MatchLabels, sts.Spec.Template.Labels) {
		t.Errorf("StatefulSet selector %v does not select its pod labels %v", sts.Spec.Selector.MatchLabels, sts.Spec.Template.Labels)
	}
	headless := m.service(t, sts.Spec.ServiceName)
	if headless.Spec.ClusterIP != corev1.ClusterIPNone {
		t.Errorf("governing Service %s is not headless", headless.Name)
	}
	if !slices.Equal(c.Args, []string{"run"}) {
		t.Errorf("container args = %v, want [run]", c.Args)
	}

	// HTTP port: KDELAY_HTTP_ADDR, the named container port and the probes agree.
	if len(c.Ports) != 1 || c.Ports[0].Name != "http" {
		t.Fatalf("container ports = %v, want one named http", c.Ports)
	}
	if want := ":" + strconv.Itoa(int(c.Ports[0].ContainerPort)); env["KDELAY_HTTP_ADDR"] != want {
		t.Errorf("KDELAY_HTTP_ADDR = %q, want %q", env["KDELAY_HTTP_ADDR"], want)
	}
	for name, p := range map[string]*corev1.Probe{"/readyz": c.ReadinessProbe, "/healthz": c.LivenessProbe} {
		if p == nil || p.HTTPGet == nil {
			t.Errorf("probe for %s missing", name)
			continue
		}
		if p.HTTPGet.Path != name || p.HTTPGet.Port.String() != "http" {
			t.Errorf("probe = %s on port %s, want %s on http", p.HTTPGet.Path, p.HTTPGet.Port.String(), name)
		}
		if p.PeriodSeconds < 1 || p.FailureThreshold < 1 {
			t.Errorf("probe %s timing not set: %+v", name, p)
		}
	}

	// Shutdown: the grace period covers KDELAY_SHUTDOWN_TIMEOUT.
	shutdown, err := time.ParseDuration(env["KDELAY_SHUTDOWN_TIMEOUT"])
	if err != nil {
		t.Errorf("KDELAY_SHUTDOWN_TIMEOUT = %q: %v", env["KDELAY_SHUTDOWN_TIMEOUT"], err)
	}
	grace := pod.TerminationGracePeriodSeconds
	if grace == nil || time.Duration(*grace)*time.Second < shutdown+10*time.Second {
		t.Errorf("terminationGracePeriodSeconds = %v does not cover KDELAY_SHUTDOWN_TIMEOUT %v plus headroom", grace, shutdown)
	}

	// Configuration.
	for _, k := range []string{"KDELAY_BROKERS", "KDELAY_TOPIC", "KDELAY_GROUP", "KDELAY_LEVELS", "KDELAY_PARTITIONS_PER_LEVEL",
		"KDELAY_MAX_DELAY", "KDELAY_LOG_LEVEL", "KDELAY_WHEEL_SYNC", "KDELAY_CLIENT_ID", "KDELAY_FETCH_MAX_WAIT",
		"KDELAY_SESSION_TIMEOUT", "KDELAY_TARGET_MISSING_TIMEOUT", "KDELAY_MISSING_TOPIC_GRACE",
		"KDELAY_RETRY_TIMEOUT", "KDELAY_STALL_TIMEOUT", "KDELAY_ALLOW_LEVEL_CHANGE", "KDELAY_CANCEL_MARGIN"} {
		if env[k] == "" {
			t.Errorf("env %s not set", k)
		}
	}
	if env["KDELAY_LOG_FORMAT"] != "json" {
		t.Errorf("KDELAY_LOG_FORMAT = %q, want json", env["KDELAY_LOG_FORMAT"])
	}
	if env["KDELAY_DATA_DIR"] != kdelayMount {
		t.Errorf("KDELAY_DATA_DIR = %q, want %s", env["KDELAY_DATA_DIR"], kdelayMount)
	}
	if m := mount(c, "data"); m == nil || m.MountPath != kdelayMount || m.ReadOnly {
		t.Errorf("data volume mount = %+v, want writable at %s", m, kdelayMount)
	}

	// Security.
	psc := pod.SecurityContext
	if psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot {
		t.Errorf("pod securityContext.runAsNonRoot not true: %+v", psc)
	}
	if psc == nil || psc.SeccompProfile == nil || psc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("pod seccompProfile not RuntimeDefault: %+v", psc)
	}
	if psc == nil || psc.FSGroup == nil {
		t.Errorf("pod fsGroup not set (the wheel volume must be writable by the non-root user)")
	}
	csc := c.SecurityContext
	switch {
	case csc == nil:
		t.Fatal("container securityContext missing")
	case csc.ReadOnlyRootFilesystem == nil || !*csc.ReadOnlyRootFilesystem:
		t.Error("readOnlyRootFilesystem not true")
	case csc.AllowPrivilegeEscalation == nil || *csc.AllowPrivilegeEscalation:
		t.Error("allowPrivilegeEscalation not false")
	case csc.Capabilities == nil || !slices.Equal(csc.Capabilities.Drop, []corev1.Capability{"ALL"}):
		t.Errorf("capabilities.drop = %+v, want [ALL]", csc.Capabilities)
	case csc.RunAsNonRoot == nil || !*csc.RunAsNonRoot:
		t.Error("container runAsNonRoot not true")
	}
	if c.Resources.Requests.Cpu().IsZero() || c.Resources.Requests.Memory().IsZero() {
		t.Errorf("resource requests not set: %+v", c.Resources)
	}
	if pod.AutomountServiceAccountToken == nil || *pod.AutomountServiceAccountToken {
		t.Error("automountServiceAccountToken should default to false")
	}

	// Every mount refers to a pod volume or a volumeClaimTemplate.
	claims := map[string]bool{}
	for _, pvc := range sts.Spec.VolumeClaimTemplates {
		claims[pvc.Name] = true
	}
	for _, vm := range c.VolumeMounts {
		if volume(pod, vm.Name) == nil && !claims[vm.Name] {
			t.Errorf("volumeMount %q has no volume", vm.Name)
		}
		if volume(pod, vm.Name) != nil && claims[vm.Name] {
			t.Errorf("volume %q defined both as pod volume and claim template", vm.Name)
		}
	}

	// Metrics Service selects the pods and targets the http port.
	metrics := m.service(t, fullname)
	if !selects(metrics.Spec.Selector, sts.Spec.Template.Labels) {
		t.Errorf("metrics Service selector %v does not select pods %v", metrics.Spec.Selector, sts.Spec.Template.Labels)
	}
	if len(metrics.Spec.Ports) != 1 || metrics.Spec.Ports[0].TargetPort.String() != "http" {
		t.Errorf("metrics Service ports = %+v", metrics.Spec.Ports)
	}

	// Every object is namespaced to the release and labelled.
	for _, o := range m.objects() {
		if o.GetNamespace() == "" {
			t.Errorf("%s %s has no namespace", o.kind, o.GetName())
		}
		if o.GetLabels()["app.kubernetes.io/managed-by"] != "Helm" {
			t.Errorf("%s %s lacks the common labels", o.kind, o.GetName())
		}
	}
	return sts, c
}

func TestDefaultValues(t *testing.T) {
	m := render(t, "")
	sts, c := checkCommon(t, m)
	pod := &sts.Spec.Template.Spec

	if want := defaultImage + ":" + chartAppVersion(t); c.Image != want {
		t.Errorf("image = %q, want %q (tag defaults to appVersion)", c.Image, want)
	}
	if r := *sts.Spec.Replicas; r < 1 || r > 3 {
		t.Errorf("default replicas = %d, want 1..3", r)
	}
	if h := sts.Spec.RevisionHistoryLimit; h == nil || *h != 10 {
		t.Errorf("revisionHistoryLimit = %v, want 10", h)
	}
	checkTestPod(t, m, sts, "busybox:1.37.0")
	if *pod.TerminationGracePeriodSeconds != 45 {
		t.Errorf("terminationGracePeriodSeconds = %d, want 30s shutdown + 15", *pod.TerminationGracePeriodSeconds)
	}
	if got := envMap(c)["KDELAY_SHUTDOWN_TIMEOUT"]; got != "30s" {
		t.Errorf("KDELAY_SHUTDOWN_TIMEOUT = %q, want 30s", got)
	}

	// Persistence is on by default: a claim template named data, no pod volume.
	if len(sts.Spec.VolumeClaimTemplates) != 1 {
		t.Fatalf("volumeClaimTemplates = %d, want 1", len(sts.Spec.VolumeClaimTemplates))
	}
	pvc := sts.Spec.VolumeClaimTemplates[0]
	if pvc.Name != "data" || !slices.Equal(pvc.Spec.AccessModes, []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}) {
		t.Errorf("claim template = %s %v", pvc.Name, pvc.Spec.AccessModes)
	}
	if got := pvc.Spec.Resources.Requests[corev1.ResourceStorage]; got.Cmp(resource.MustParse("1Gi")) != 0 {
		t.Errorf("claim size = %s, want 1Gi", got.String())
	}
	if pvc.Spec.StorageClassName != nil {
		t.Errorf("storageClassName = %q, want unset (cluster default)", *pvc.Spec.StorageClassName)
	}

	// On by default: the topic-creation hook Job and, with 2 replicas,
	// the PodDisruptionBudget. The other optional parts are off.
	if len(m.secrets)+len(m.configMaps)+len(m.other)+len(m.netpols) != 0 {
		t.Errorf("default rendering has optional objects: %d secrets, %d configmaps, %d netpols, %d other",
			len(m.secrets), len(m.configMaps), len(m.netpols), len(m.other))
	}
	if len(m.jobs) != 1 || len(m.jobs[0].Spec.Template.Spec.Containers) != 1 ||
		!slices.Equal(m.jobs[0].Spec.Template.Spec.Containers[0].Args, []string{"topic", "create"}) {
		t.Errorf("default rendering: want the topic Job running `topic create`, got %d jobs", len(m.jobs))
	}
	if *sts.Spec.Replicas != 2 || len(m.pdbs) != 1 || m.pdbs[0].Spec.MaxUnavailable == nil || m.pdbs[0].Spec.MaxUnavailable.IntValue() != 1 ||
		!selects(m.pdbs[0].Spec.Selector.MatchLabels, sts.Spec.Template.Labels) {
		t.Errorf("default rendering: want 2 replicas and a PDB (maxUnavailable 1) selecting them; got %d replicas, %d PDBs", *sts.Spec.Replicas, len(m.pdbs))
	}
	env := envMap(c)
	if v, ok := env["KDELAY_WHEEL_HORIZON"]; ok {
		t.Errorf("KDELAY_WHEEL_HORIZON = %q by default, want unset (derived from the levels)", v)
	}
	// GOMEMLIMIT: 90% of the 512Mi limit.
	if env["GOMEMLIMIT"] != strconv.Itoa(512<<20*9/10) {
		t.Errorf("GOMEMLIMIT = %q, want %d (0.9 x 512Mi)", env["GOMEMLIMIT"], 512<<20*9/10)
	}
	if tsc := pod.TopologySpreadConstraints; len(tsc) != 1 || tsc[0].TopologyKey != "topology.kubernetes.io/zone" ||
		tsc[0].WhenUnsatisfiable != corev1.ScheduleAnyway || tsc[0].LabelSelector == nil || !selects(tsc[0].LabelSelector.MatchLabels, sts.Spec.Template.Labels) {
		t.Errorf("default topology spread = %+v, want a soft zone spread of the pods", tsc)
	}
	for _, k := range []string{"KDELAY_SASL_MECHANISM", "KDELAY_SASL_PASSWORD_FILE", "KDELAY_TLS_ENABLED"} {
		if _, ok := envMap(c)[k]; ok {
			t.Errorf("%s set although SASL/TLS are off", k)
		}
	}
	if len(m.accounts) != 1 || pod.ServiceAccountName != m.accounts[0].Name {
		t.Errorf("pod serviceAccountName %q does not match the chart ServiceAccount", pod.ServiceAccountName)
	}
	if pod.Affinity == nil || pod.Affinity.PodAntiAffinity == nil ||
		len(pod.Affinity.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution) != 1 {
		t.Errorf("default soft pod anti-affinity missing: %+v", pod.Affinity)
	}
}

func TestPersistenceDisabled(t *testing.T) {
	m := render(t, "", "persistence.enabled=false", "persistence.emptyDirSizeLimit=512Mi")
	sts, _ := checkCommon(t, m)
	if len(sts.Spec.VolumeClaimTemplates) != 0 {
		t.Errorf("volumeClaimTemplates rendered with persistence disabled")
	}
	v := volume(&sts.Spec.Template.Spec, "data")
	if v == nil || v.EmptyDir == nil {
		t.Fatalf("data volume = %+v, want emptyDir", v)
	}
	if v.EmptyDir.SizeLimit == nil || v.EmptyDir.SizeLimit.String() != "512Mi" {
		t.Errorf("emptyDir sizeLimit = %v, want 512Mi", v.EmptyDir.SizeLimit)
	}
}

func TestAllOn(t *testing.T) {
	m := render(t, allOnValues)
	sts, c := checkCommon(t, m)
	pod := &sts.Spec.Template.Spec
	env := envMap(c)

	if c.Image != defaultImage+":1.2.3" {
		t.Errorf("image = %q", c.Image)
	}
	if h := sts.Spec.RevisionHistoryLimit; h == nil || *h != 3 {
		t.Errorf("revisionHistoryLimit = %v, want 3", h)
	}
	checkTestPod(t, m, sts, "registry.example.com/tools/busybox:1.37.0")
	checkExtraObjects(t, m)
	if *sts.Spec.Replicas != 3 {
		t.Errorf("replicas = %d, want 3", *sts.Spec.Replicas)
	}
	if *pod.TerminationGracePeriodSeconds != 80 || env["KDELAY_SHUTDOWN_TIMEOUT"] != "60s" {
		t.Errorf("grace = %d, shutdown = %s; want 80 and 60s", *pod.TerminationGracePeriodSeconds, env["KDELAY_SHUTDOWN_TIMEOUT"])
	}
	wantEnv := map[string]string{
		"KDELAY_BROKERS":                "kafka-0.kafka:9093,kafka-1.kafka:9093,kafka-2.kafka:9093",
		"KDELAY_TOPIC":                  "delays",
		"KDELAY_GROUP":                  "kdelay-prod",
		"KDELAY_DLQ_TOPIC":              "delays-dead",
		"KDELAY_CANCEL_TOPIC":           "delays-cancel",
		"KDELAY_CANCELLED_TOPIC":        "delays-cancelled",
		"KDELAY_CANCEL_MARGIN":          "200ms",
		"KDELAY_PARTITIONS_PER_LEVEL":   "2",
		"KDELAY_TARGET_ALLOW":           "orders.*,billing.*",
		"KDELAY_TARGET_DENY":            "__*",
		"KDELAY_MAX_DELAY":              "168h",
		"KDELAY_LOG_LEVEL":              "debug",
		"KDELAY_HTTP_ADDR":              ":9090",
		"KDELAY_WHEEL_HORIZON":          "30m",
		"KDELAY_WHEEL_SYNC":             "interval",
		"KDELAY_CLIENT_ID":              "kdelay-prod",
		"KDELAY_FETCH_MAX_WAIT":         "250ms",
		"KDELAY_SESSION_TIMEOUT":        "20s",
		"KDELAY_TARGET_MISSING_TIMEOUT": "2m",
		"KDELAY_MISSING_TOPIC_GRACE":    "45s",
		"KDELAY_RETRY_TIMEOUT":          "5m",
		"KDELAY_STALL_TIMEOUT":          "10m",
		"KDELAY_ALLOW_LEVEL_CHANGE":     "false",
		"GOMEMLIMIT":                    strconv.Itoa(1 << 30 * 3 / 4),
		"KDELAY_SASL_MECHANISM":         "SCRAM-SHA-512",
		"KDELAY_SASL_USERNAME":          "kdelay",
		"KDELAY_SASL_PASSWORD_FILE":     "/etc/kdelay/sasl/password",
		"KDELAY_TLS_ENABLED":            "true",
		"KDELAY_TLS_CA_FILE":            "/etc/kdelay/tls/ca.crt",
		"KDELAY_TLS_CERT_FILE":          "/etc/kdelay/tls/tls.crt",
		"KDELAY_TLS_KEY_FILE":           "/etc/kdelay/tls/tls.key",
		"GOMAXPROCS":                    "2",
	}
	for k, v := range wantEnv {
		if env[k] != v {
			t.Errorf("env %s = %q, want %q", k, env[k], v)
		}
	}
	if _, ok := env["KDELAY_SASL_PASSWORD"]; ok {
		t.Error("the SASL password must come from a mounted file, not a plain env value")
	}

	// PVC template details.
	pvc := sts.Spec.VolumeClaimTemplates[0]
	if pvc.Spec.StorageClassName == nil || *pvc.Spec.StorageClassName != "fast-ssd" {
		t.Errorf("storageClassName = %v", pvc.Spec.StorageClassName)
	}
	if got := pvc.Spec.Resources.Requests[corev1.ResourceStorage]; got.Cmp(resource.MustParse("5Gi")) != 0 {
		t.Errorf("claim size = %s", got.String())
	}
	if rp := sts.Spec.PersistentVolumeClaimRetentionPolicy; rp == nil || rp.WhenDeleted != appsv1.DeletePersistentVolumeClaimRetentionPolicyType {
		t.Errorf("persistentVolumeClaimRetentionPolicy = %+v", rp)
	}

	// SASL: chart-created Secret, mounted read-only as the password file.
	saslName := fullname + "-sasl"
	sec := m.secret(saslName)
	if sec == nil {
		t.Fatalf("no Secret %s", saslName)
	}
	if string(sec.Data["password"]) != "s3cr3t" {
		t.Errorf("Secret %s password = %q", saslName, sec.Data["password"])
	}
	checkSecretFile(t, pod, c, "sasl", saslName, "password", env["KDELAY_SASL_PASSWORD_FILE"])
	if sts.Spec.Template.Annotations["checksum/secret"] == "" {
		t.Error("pod template lacks checksum/secret annotation (password changes would not roll the pods)")
	}

	// TLS: existing Secret mounted read-only; every file env points into it.
	tlsVol := volume(pod, "tls")
	if tlsVol == nil || tlsVol.Secret == nil || tlsVol.Secret.SecretName != "kafka-client-tls" {
		t.Fatalf("tls volume = %+v", tlsVol)
	}
	tlsMount := mount(c, "tls")
	if tlsMount == nil || !tlsMount.ReadOnly {
		t.Fatalf("tls mount = %+v, want read-only", tlsMount)
	}
	for _, k := range []string{"KDELAY_TLS_CA_FILE", "KDELAY_TLS_CERT_FILE", "KDELAY_TLS_KEY_FILE"} {
		if !strings.HasPrefix(env[k], tlsMount.MountPath+"/") {
			t.Errorf("%s = %q is not under the tls mount %s", k, env[k], tlsMount.MountPath)
		}
	}

	// Scheduling and pod extras.
	if !slices.ContainsFunc(pod.ImagePullSecrets, func(r corev1.LocalObjectReference) bool { return r.Name == "regcred" }) {
		t.Error("imagePullSecrets not rendered")
	}
	if pod.NodeSelector["kubernetes.io/os"] != "linux" || len(pod.Tolerations) != 1 || pod.PriorityClassName != "high-priority" {
		t.Errorf("nodeSelector/tolerations/priorityClassName not rendered: %v %v %q", pod.NodeSelector, pod.Tolerations, pod.PriorityClassName)
	}
	if pod.Affinity == nil || pod.Affinity.PodAntiAffinity == nil ||
		len(pod.Affinity.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution) != 1 ||
		pod.Affinity.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution[0].TopologyKey != "topology.kubernetes.io/zone" {
		t.Errorf("hard anti-affinity not rendered: %+v", pod.Affinity)
	}
	if len(pod.TopologySpreadConstraints) != 1 || pod.TopologySpreadConstraints[0].LabelSelector == nil ||
		!selects(pod.TopologySpreadConstraints[0].LabelSelector.MatchLabels, sts.Spec.Template.Labels) {
		t.Errorf("topologySpreadConstraints = %+v", pod.TopologySpreadConstraints)
	}
	if sts.Spec.Template.Annotations["example.com/owner"] != "platform" || sts.Spec.Template.Labels["tier"] != "messaging" {
		t.Error("podAnnotations/podLabels not rendered")
	}
	if mount(c, "scratch") == nil || volume(pod, "scratch") == nil {
		t.Error("extraVolumes/extraVolumeMounts not rendered")
	}
	if sts.Labels["team"] != "platform" {
		t.Error("commonLabels not rendered")
	}
	if len(m.accounts) != 1 || m.accounts[0].Name != "kdelay-sa" || pod.ServiceAccountName != "kdelay-sa" {
		t.Errorf("serviceAccount name not honoured")
	}

	// PodDisruptionBudget.
	if len(m.pdbs) != 1 {
		t.Fatalf("PodDisruptionBudgets = %d, want 1", len(m.pdbs))
	}
	pdb := m.pdbs[0]
	if pdb.Spec.MaxUnavailable == nil || pdb.Spec.MaxUnavailable.IntValue() != 1 || pdb.Spec.MinAvailable != nil {
		t.Errorf("pdb = %+v", pdb.Spec)
	}
	if !selects(pdb.Spec.Selector.MatchLabels, sts.Spec.Template.Labels) {
		t.Error("PodDisruptionBudget does not select the kdelay pods")
	}

	checkServiceMonitor(t, m, sts)
	checkPrometheusRule(t, m)
	checkNetworkPolicy(t, m, sts)
	// The OAUTHBEARER variables render with that mechanism only.
	_, oc := checkCommon(t, render(t, "", "kafka.sasl.enabled=true", "kafka.sasl.mechanism=OAUTHBEARER", "kafka.sasl.username=kdelay-client",
		"kafka.sasl.password=s", "kafka.sasl.oauth.tokenURL=https://issuer.example/token", "kafka.sasl.oauth.scope=kafka",
		"kafka.sasl.oauth.extensions=logicalCluster=lkc-1"))
	oauth := envMap(oc)
	for k, v := range map[string]string{
		"KDELAY_SASL_MECHANISM": "OAUTHBEARER", "KDELAY_SASL_USERNAME": "kdelay-client", "KDELAY_SASL_PASSWORD_FILE": "/etc/kdelay/sasl/password",
		"KDELAY_SASL_OAUTH_TOKEN_URL": "https://issuer.example/token", "KDELAY_SASL_OAUTH_SCOPE": "kafka", "KDELAY_SASL_OAUTH_EXTENSIONS": "logicalCluster=lkc-1",
	} {
		if oauth[k] != v {
			t.Errorf("OAUTHBEARER values: env %s = %q, want %q", k, oauth[k], v)
		}
	}
	if _, ok := env["KDELAY_SASL_OAUTH_TOKEN_URL"]; ok {
		t.Error("KDELAY_SASL_OAUTH_TOKEN_URL rendered with SCRAM-SHA-512")
	}
	every := maps.Clone(env)
	maps.Copy(every, oauth)
	checkEveryVariable(t, every)
	checkDashboard(t, m)
	checkTopicJob(t, m, sts, c, fullname+"-topic-create-sasl", "password")
}

// checkSecretFile verifies that volume vol is the Secret secretName, projects
// key to a file, is mounted read-only and that envPath points at that file.
func checkSecretFile(t *testing.T, pod *corev1.PodSpec, c *corev1.Container, vol, secretName, key, envPath string) {
	t.Helper()
	v := volume(pod, vol)
	if v == nil || v.Secret == nil || v.Secret.SecretName != secretName {
		t.Errorf("%s volume = %+v, want Secret %s", vol, v, secretName)
		return
	}
	vm := mount(c, vol)
	if vm == nil || !vm.ReadOnly {
		t.Errorf("%s mount = %+v, want read-only", vol, vm)
		return
	}
	if v.Secret.DefaultMode == nil || *v.Secret.DefaultMode&0o022 != 0 {
		t.Errorf("%s defaultMode = %v, want no group/other write", vol, v.Secret.DefaultMode)
	}
	if len(v.Secret.Items) != 1 || v.Secret.Items[0].Key != key {
		t.Errorf("%s items = %+v, want key %s", vol, v.Secret.Items, key)
		return
	}
	if want := vm.MountPath + "/" + v.Secret.Items[0].Path; envPath != want {
		t.Errorf("password file env = %q, want %q", envPath, want)
	}
}

func checkServiceMonitor(t *testing.T, m *manifests, sts *appsv1.StatefulSet) {
	t.Helper()
	var sm *unstructured.Unstructured
	for _, o := range m.other {
		if o.GetKind() == "ServiceMonitor" {
			sm = o
		}
	}
	if sm == nil {
		t.Fatal("no ServiceMonitor")
	}
	if sm.GetNamespace() != "monitoring" || sm.GetLabels()["release"] != "prometheus" {
		t.Errorf("ServiceMonitor namespace/labels = %s %v", sm.GetNamespace(), sm.GetLabels())
	}
	endpoints, _, _ := unstructured.NestedSlice(sm.Object, "spec", "endpoints")
	if len(endpoints) != 1 {
		t.Fatalf("ServiceMonitor endpoints = %v", endpoints)
	}
	ep := endpoints[0].(map[string]any)
	if ep["port"] != "http" || ep["path"] != "/metrics" || ep["interval"] != "15s" {
		t.Errorf("ServiceMonitor endpoint = %v", ep)
	}
	ns, _, _ := unstructured.NestedStringSlice(sm.Object, "spec", "namespaceSelector", "matchNames")
	if !slices.Equal(ns, []string{releaseNS}) {
		t.Errorf("namespaceSelector = %v, want [%s]", ns, releaseNS)
	}
	sel, _, _ := unstructured.NestedStringMap(sm.Object, "spec", "selector", "matchLabels")
	var matched []string
	for _, s := range m.services {
		if selects(sel, s.Labels) {
			matched = append(matched, s.Name)
		}
	}
	if !slices.Equal(matched, []string{fullname}) {
		t.Errorf("ServiceMonitor selects Services %v, want only %s", matched, fullname)
	}
}

func checkDashboard(t *testing.T, m *manifests) {
	t.Helper()
	var cm *corev1.ConfigMap
	for _, c := range m.configMaps {
		if c.Name == fullname+"-dashboard" {
			cm = c
		}
	}
	if cm == nil {
		t.Fatalf("no dashboard ConfigMap %s-dashboard", fullname)
	}
	if cm.Labels["grafana_dashboard"] != "1" || cm.Namespace != "monitoring" || cm.Annotations["grafana_folder"] != "Kafka" {
		t.Errorf("dashboard ConfigMap metadata = %+v", cm.ObjectMeta)
	}
	raw := cm.Data["kdelay.json"]
	var dash struct {
		UID    string `json:"uid"`
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal([]byte(raw), &dash); err != nil {
		t.Fatalf("dashboard JSON: %v", err)
	}
	var exprs []string
	for _, p := range dash.Panels {
		for _, tg := range p.Targets {
			exprs = append(exprs, tg.Expr)
		}
	}
	all := strings.Join(exprs, "\n")
	checkMetricNames(t, "dashboard", exprs)
	for _, want := range []string{
		"max by (pod) (kdelay_ready",
		"sum by (reason) (rate(kdelay_produce_retries_total",
		"sum by (pod) (kdelay_assigned_partitions",
		// Idle levels export 0 (they would plot at about -1.8e9 s).
		"min by (level) (kdelay_next_due_timestamp_seconds{namespace=~\"$namespace\",pod=~\"$pod\"} > 0) - time()",
		"histogram_quantile(0.99, sum by (le) (rate(kdelay_lateness_seconds_bucket",
		"histogram_quantile(0.5, sum by (le) (rate(kdelay_lateness_seconds_bucket",
		"rate(kdelay_records_forwarded_total",
		"rate(kdelay_records_dead_lettered_total",
		"kdelay_wheel_pending_entries",
		"sum by (level) (kdelay_consumer_lag",
		"sum by (level) (kdelay_pending_records",
		"histogram_quantile(0.99, sum by (le) (rate(kdelay_commit_fsync_seconds_bucket",
	} {
		if !strings.Contains(all, want) {
			t.Errorf("dashboard has no query containing %q", want)
		}
	}
}

func checkTopicJob(t *testing.T, m *manifests, sts *appsv1.StatefulSet, runC *corev1.Container, saslSecret, saslKey string) {
	t.Helper()
	if len(m.jobs) != 1 {
		t.Fatalf("Jobs = %d, want the topic Job", len(m.jobs))
	}
	job := m.jobs[0]
	hooks := strings.Split(job.Annotations["helm.sh/hook"], ",")
	if !slices.Contains(hooks, "pre-install") || !slices.Contains(hooks, "pre-upgrade") {
		t.Errorf("topic Job hook = %q, want pre-install,pre-upgrade", job.Annotations["helm.sh/hook"])
	}
	if !strings.Contains(job.Annotations["helm.sh/hook-delete-policy"], "before-hook-creation") {
		t.Errorf("topic Job hook-delete-policy = %q", job.Annotations["helm.sh/hook-delete-policy"])
	}
	pod := &job.Spec.Template.Spec
	c := container(t, pod, "topic-create")
	if c.Image != runC.Image {
		t.Errorf("Job image %q != StatefulSet image %q", c.Image, runC.Image)
	}
	if len(c.Args) < 2 || c.Args[0] != "topic" || c.Args[1] != "create" {
		t.Errorf("Job args = %v, want topic create ...", c.Args)
	}
	args := strings.Join(c.Args, " ")
	for _, want := range []string{"--replication-factor 3", "--config min.insync.replicas=2", "--config retention.ms=2678400000"} {
		if !strings.Contains(args, want) {
			t.Errorf("Job args %q lack %q", args, want)
		}
	}
	if pod.RestartPolicy != corev1.RestartPolicyNever {
		t.Errorf("Job restartPolicy = %q", pod.RestartPolicy)
	}
	// Same configuration as the sidecar, but for the relay's own group
	// member ID and transactional ID (from the pod name) and its Go memory
	// limit (from the container's limit), which the Job has no use for.
	runEnv := slices.DeleteFunc(slices.Clone(runC.Env), func(e corev1.EnvVar) bool {
		return e.Name == "KDELAY_INSTANCE_ID" || e.Name == "GOMEMLIMIT" || e.Name == "RELAY_POD_NAME" || e.Name == "KDELAY_TRANSACTIONAL_ID"
	})
	if !slices.ContainsFunc(runC.Env, func(e corev1.EnvVar) bool {
		return e.Name == "KDELAY_TRANSACTIONAL_ID" && strings.HasSuffix(e.Value, "-$(RELAY_POD_NAME)")
	}) {
		t.Error("StatefulSet env lacks KDELAY_TRANSACTIONAL_ID per pod (exactly-once mode)")
	}
	if !slices.ContainsFunc(runC.Env, func(e corev1.EnvVar) bool {
		return e.Name == "KDELAY_INSTANCE_ID" && e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "metadata.name"
	}) {
		t.Error("StatefulSet env lacks KDELAY_INSTANCE_ID from metadata.name (static membership)")
	}
	if !slices.EqualFunc(c.Env, runEnv, func(a, b corev1.EnvVar) bool { return a.String() == b.String() }) {
		t.Errorf("Job env differs from the StatefulSet env:\n%v\n%v", c.Env, runC.Env)
	}
	// Pod hardening identical.
	if pod.SecurityContext.String() != sts.Spec.Template.Spec.SecurityContext.String() || c.SecurityContext.String() != runC.SecurityContext.String() {
		t.Error("Job securityContext differs from the StatefulSet one")
	}
	// Credentials: the password file comes from a Secret that exists when the hook runs.
	checkSecretFile(t, pod, c, "sasl", saslSecret, saslKey, envMap(c)["KDELAY_SASL_PASSWORD_FILE"])
	if sec := m.secret(saslSecret); sec != nil {
		// A chart-created copy must itself be a hook created before the Job.
		jw, _ := strconv.Atoi(job.Annotations["helm.sh/hook-weight"])
		sw, err := strconv.Atoi(sec.Annotations["helm.sh/hook-weight"])
		if !strings.Contains(sec.Annotations["helm.sh/hook"], "pre-install") || err != nil || sw >= jw {
			t.Errorf("Secret %s read by the hook Job is not a pre-install hook weighted before it: %v", saslSecret, sec.Annotations)
		}
	}
	if v := volume(pod, "tls"); runC != nil && mount(runC, "tls") != nil && (v == nil || v.Secret == nil || mount(c, "tls") == nil || !mount(c, "tls").ReadOnly) {
		t.Errorf("Job lacks the read-only tls Secret volume: %+v", v)
	}
	// The Job's pod must not be taken for a kdelay pod.
	for _, s := range m.services {
		if selects(s.Spec.Selector, job.Spec.Template.Labels) {
			t.Errorf("Service %s selects the topic Job pod", s.Name)
		}
	}
	for _, p := range m.pdbs {
		if selects(p.Spec.Selector.MatchLabels, job.Spec.Template.Labels) {
			t.Errorf("PodDisruptionBudget %s selects the topic Job pod", p.Name)
		}
	}
}

func TestExistingSaslSecret(t *testing.T) {
	m := render(t, "",
		"kafka.sasl.enabled=true", "kafka.sasl.username=kdelay", "kafka.sasl.existingSecret=my-sasl",
		"kafka.sasl.existingSecretPasswordKey=pw", "topicCreate.enabled=true", "topicCreate.replicationFactor=3",
		"topicCreate.config.min\\.insync\\.replicas=2", "topicCreate.config.retention\\.ms=2678400000")
	sts, c := checkCommon(t, m)
	if len(m.secrets) != 0 {
		t.Errorf("chart created %d Secrets although existingSecret is set", len(m.secrets))
	}
	checkSecretFile(t, &sts.Spec.Template.Spec, c, "sasl", "my-sasl", "pw", envMap(c)["KDELAY_SASL_PASSWORD_FILE"])
	if _, ok := sts.Spec.Template.Annotations["checksum/secret"]; ok {
		t.Error("checksum/secret set although the chart manages no Secret")
	}
	checkTopicJob(t, m, sts, c, "my-sasl", "pw")
	if sa := m.jobs[0].Spec.Template.Spec.ServiceAccountName; sa != "" {
		t.Errorf("topic Job uses ServiceAccount %q, which the chart creates only after pre-install hooks", sa)
	}

	// With a pre-existing ServiceAccount the Job uses it too.
	m = render(t, "", "serviceAccount.create=false", "serviceAccount.name=kafka-iam", "topicCreate.enabled=true")
	sts, _ = checkCommon(t, m)
	if len(m.jobs) != 1 || m.jobs[0].Spec.Template.Spec.ServiceAccountName != "kafka-iam" || sts.Spec.Template.Spec.ServiceAccountName != "kafka-iam" {
		t.Errorf("existing ServiceAccount not used by the pods and the topic Job")
	}
	if len(m.accounts) != 0 {
		t.Errorf("ServiceAccount created although serviceAccount.create=false")
	}
}

func TestInvalidValuesRejected(t *testing.T) {
	for name, sets := range map[string][]string{
		"bad log level":             {"config.logLevel=verbose"},
		"bad log format":            {"config.logFormat=xml"},
		"bad wheel sync":            {"config.wheelSync=always"},
		"bad sasl mechanism":        {"kafka.sasl.mechanism=GSSAPI"},
		"day duration":              {"config.maxDelay=30d"},
		"sasl without password":     {"kafka.sasl.enabled=true"},
		"unknown top-level value":   {"replicas=3"},
		"anti-affinity preset typo": {"podAntiAffinity=medium"},
		"zero partitions per level": {"config.partitionsPerLevel=0"},
		"unknown alert disabled":    {"prometheusRule.disabled={KdelayNope}"},
		"gomemlimit ratio above 1":  {"goMemLimitRatio=2"},
		"memory limit unit":         {"resources.limits.memory=1Gb"},
		"bad session timeout":       {"config.sessionTimeout=10"},
	} {
		if out, err := runHelm(t, renderArgs(chartDir, "", sets...)...); err == nil {
			t.Errorf("%s (%v): rendering succeeded, want an error\n%.300s", name, sets, out)
		}
	}
}

// TestNotes renders templates/NOTES.txt (helm template skips it) by wrapping
// it into a template of a copy of the chart.
func TestNotes(t *testing.T) {
	dir := t.TempDir()
	dst := filepath.Join(dir, "kdelay")
	if err := os.CopyFS(dst, os.DirFS(chartDir)); err != nil {
		t.Fatal(err)
	}
	notes, err := os.ReadFile(filepath.Join(dst, "templates", "NOTES.txt"))
	if err != nil {
		t.Fatal(err)
	}
	wrapped := "{{- define \"chartcheck.notes\" }}" + string(notes) + "{{- end }}\nnotes: {{ include \"chartcheck.notes\" . | toJson }}\n"
	if err := os.WriteFile(filepath.Join(dst, "templates", "notes-check.yaml"), []byte(wrapped), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		values string
		sets   []string
		want   []string
	}{
		{"", nil, []string{"port-forward svc/" + fullname + " 8080:8080", "/metrics", "hook Job " + fullname + "-topic-create"}},
		// Without the hook a path that works: a throw-away pod (the relay
		// pods crash-loop without topics and cannot be exec'd into).
		{"", []string{"topicCreate.enabled=false"}, []string{"kubectl -n " + releaseNS + " run " + fullname + "-topic-create --rm -i --restart=Never", "-- topic create"}},
		{filepath.Join(dst, "ci", "all-on-values.yaml"), []string{"replicaCount=40"}, []string{"ServiceMonitor", "dashboard", "WARNING: replicaCount (40)"}},
	} {
		args := append(renderArgs(dst, tc.values, tc.sets...), "--show-only", "templates/notes-check.yaml")
		out, err := runHelm(t, args...)
		if err != nil {
			t.Fatal(err)
		}
		var doc struct {
			Notes string `json:"notes"`
		}
		if err := yaml.Unmarshal([]byte(strings.TrimPrefix(strings.TrimSpace(out), "---")), &doc); err != nil {
			t.Fatalf("NOTES output: %v\n%s", err, out)
		}
		for _, w := range tc.want {
			if !strings.Contains(doc.Notes, w) {
				t.Errorf("NOTES (values %q %v) lack %q:\n%s", tc.values, tc.sets, w, doc.Notes)
			}
		}
		if strings.Contains(doc.Notes, "kubectl exec") || strings.Contains(doc.Notes, " exec ") {
			t.Errorf("NOTES (values %q %v) suggest exec into a pod that may be crash-looping:\n%s", tc.values, tc.sets, doc.Notes)
		}
	}
}

// objects lists every decoded object with its kind.
func (m *manifests) objects() []kindObject {
	var out []kindObject
	add := func(kind string, o metav1.Object) { out = append(out, kindObject{kind, o}) }
	for _, o := range m.statefulSets {
		add("StatefulSet", o)
	}
	for _, o := range m.services {
		add("Service", o)
	}
	for _, o := range m.secrets {
		add("Secret", o)
	}
	for _, o := range m.configMaps {
		add("ConfigMap", o)
	}
	for _, o := range m.accounts {
		add("ServiceAccount", o)
	}
	for _, o := range m.jobs {
		add("Job", o)
	}
	for _, o := range m.pdbs {
		add("PodDisruptionBudget", o)
	}
	for _, o := range m.netpols {
		add("NetworkPolicy", o)
	}
	for _, o := range m.pods {
		add("Pod", o)
	}
	for _, o := range m.deployments {
		add("Deployment", o)
	}
	for _, o := range m.other {
		add(o.GetKind(), o)
	}
	return out
}

type kindObject struct {
	kind string
	metav1.Object
}
