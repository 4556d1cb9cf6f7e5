package chartcheck

import (
	"slices"
	"testing"
)

// TestConsole: the console Deployment and Service are off by default; on,
// the Deployment runs `kdelay console` with the relays' Kafka settings,
// the token from the Secret (never a plain value), probes on /readyz and
// /healthz, and nothing that selects the relays selects it, nor the
// reverse.
func TestConsole(t *testing.T) {
	if m := render(t, ""); len(m.deployments) != 0 {
		t.Fatalf("console rendered by default: %d Deployments", len(m.deployments))
	}
	m := render(t, allOnValues)
	if len(m.deployments) != 1 {
		t.Fatalf("%d Deployments with console.enabled, want 1", len(m.deployments))
	}
	d := m.deployments[0]
	if d.Spec.Replicas == nil || *d.Spec.Replicas != 2 {
		t.Errorf("console replicas = %v, want 2", d.Spec.Replicas)
	}
	pod := &d.Spec.Template.Spec
	if len(pod.Containers) != 1 {
		t.Fatalf("console containers: %d", len(pod.Containers))
	}
	c := &pod.Containers[0]
	if !slices.Equal(c.Args, []string{"console"}) {
		t.Errorf("console args = %v", c.Args)
	}
	env := map[string]string{}
	for _, e := range c.Env {
		env[e.Name] = e.Value
		if e.Name == "KDELAY_CONSOLE_TOKEN" {
			if e.Value != "" || e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil ||
				e.ValueFrom.SecretKeyRef.Name != "kdelay-console-token" || e.ValueFrom.SecretKeyRef.Key != "token" {
				t.Errorf("KDELAY_CONSOLE_TOKEN = %+v, want the Secret's key", e)
			}
		}
	}
	for k, want := range map[string]string{"KDELAY_CONSOLE_ADDR": ":8081", "KDELAY_CONSOLE_AUTH": "all", "KDELAY_TOPIC": "delays", "KDELAY_GROUP": "kdelay-prod"} {
		if env[k] != want {
			t.Errorf("console %s = %q, want %q", k, env[k], want)
		}
	}
	if _, ok := env["KDELAY_CONSOLE_TOKEN"]; !ok {
		t.Error("console without KDELAY_CONSOLE_TOKEN")
	}
	if p := c.ReadinessProbe; p == nil || p.HTTPGet == nil || p.HTTPGet.Path != "/readyz" {
		t.Errorf("console readiness probe %+v", p)
	}
	if mount(c, "tls") == nil || mount(c, "sasl") == nil {
		t.Error("console lacks the Kafka credential mounts")
	}
	labels := d.Spec.Template.Labels
	var consoleSvc int
	for _, s := range m.services {
		if selects(s.Spec.Selector, labels) {
			consoleSvc++
			if s.Spec.Ports[0].Port != 8081 {
				t.Errorf("console Service port %d", s.Spec.Ports[0].Port)
			}
		}
	}
	if consoleSvc != 1 {
		t.Errorf("%d Services select the console pods, want its own one", consoleSvc)
	}
	for _, p := range m.pdbs {
		if selects(p.Spec.Selector.MatchLabels, labels) {
			t.Errorf("PodDisruptionBudget %s selects the console pods", p.Name)
		}
	}
	for _, s := range m.statefulSets {
		if selects(d.Spec.Selector.MatchLabels, s.Spec.Template.Labels) {
			t.Errorf("the console Deployment's selector selects the relay pods")
		}
	}
	// auth=all without a token Secret is refused at render time.
	if _, err := runHelm(t, renderArgs(chartDir, "", "console.enabled=true", "console.auth=all")...); err == nil {
		t.Error("console.auth=all without a token Secret rendered")
	}
}
