package main

import (
	"strings"
	"testing"
)

func TestLevels(t *testing.T) {
	t.Parallel()
	r := kdelay(t, t.Context(), map[string]string{}, nil, "levels")
	mustCode(t, r, exitOK)
	mustContain(t, "default levels", r.stdout,
		"delay topic delay-topic: 18 levels x 1 partitions per level = 18 partitions; wheel horizon 1h",
		"1      1s     0           [0, 5s)",
		"17     1h     16          [1h, 2h)",
		"18     2h     17          [2h, ∞)",
	)

	r = kdelay(t, t.Context(), map[string]string{"KDELAY_PARTITIONS_PER_LEVEL": "3"}, nil, "levels", "--levels", "1s 2s 4s 8s")
	mustCode(t, r, exitOK)
	mustContain(t, "scaled levels", r.stdout,
		"4 levels x 3 partitions per level = 12 partitions; wheel horizon 4s",
		"2      2s     3-5         [2s, 4s)",
	)
	if n := strings.Count(r.stdout, "\n"); n != 2+1+4 {
		t.Errorf("%d lines, want 7:\n%s", n, r.stdout)
	}
}

func TestVersion(t *testing.T) {
	t.Parallel()
	r := kdelay(t, t.Context(), nil, nil, "version")
	mustCode(t, r, exitOK)
	mustContain(t, "version", r.stdout, "kdelay dev\n", "go     go1.")
	r = kdelay(t, t.Context(), nil, nil, "--version")
	mustCode(t, r, exitOK)
	mustContain(t, "--version", r.stdout, "kdelay dev\n", "go     go1.")
}

func TestSettingsFromEnvAndFlags(t *testing.T) {
	t.Parallel()
	env := map[string]string{"KDELAY_LEVELS": "1s 2s", "KDELAY_TOPIC": "from-env"}
	r := kdelay(t, t.Context(), env, nil, "levels")
	mustCode(t, r, exitOK)
	mustContain(t, "levels from the environment", r.stdout, "delay topic from-env: 2 levels x 1 partitions per level = 2 partitions")

	r = kdelay(t, t.Context(), env, nil, "levels", "--levels", "1s 2s 3s")
	mustCode(t, r, exitOK)
	mustContain(t, "a flag wins over the environment", r.stdout, "delay topic from-env: 3 levels x 1 partitions per level = 3 partitions")

	// Persistent flags work before the command name too.
	r = kdelay(t, t.Context(), env, nil, "--topic", "from-flag", "levels")
	mustCode(t, r, exitOK)
	mustContain(t, "flag before the command", r.stdout, "delay topic from-flag: 2 levels")
}
