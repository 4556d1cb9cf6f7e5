package levels

import (
	"strings"
	"testing"
	"time"
)

func TestParseSpecDefault(t *testing.T) {
	durs, err := ParseSpec(DefaultSpec)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := len(durs), 18; got != want {
		t.Fatalf("levels = %d, want %d", got, want)
	}
	if durs[0] != time.Second || durs[17] != 2*time.Hour {
		t.Fatalf("first/last = %s/%s", durs[0], durs[17])
	}
	if got := Default().String(); got != DefaultSpec {
		t.Fatalf("String() = %q, want %q", got, DefaultSpec)
	}
}

func TestParseSpec(t *testing.T) {
	for _, tc := range []struct {
		spec    string
		want    []time.Duration
		wantErr string // substring; names the bad token
	}{
		{spec: "1s 5s 1m", want: []time.Duration{time.Second, 5 * time.Second, time.Minute}},
		{spec: "1s,2s, 4s", want: []time.Duration{time.Second, 2 * time.Second, 4 * time.Second}},
		{spec: "2h 1d", want: []time.Duration{2 * time.Hour, 24 * time.Hour}},
		{spec: "500ms 1h30m", want: []time.Duration{500 * time.Millisecond, 90 * time.Minute}},
		{spec: "", wantErr: "empty"},
		{spec: "  , ", wantErr: "empty"},
		{spec: "1s 1s", wantErr: `entry 2 "1s": not greater`},
		{spec: "5s 1s", wantErr: `entry 2 "1s": not greater`},
		{spec: "0s", wantErr: `entry 1 "0s": must be positive`},
		{spec: "1s -5s", wantErr: `entry 2 "-5s": must be positive`},
		{spec: "1s 5x", wantErr: `entry 2 "5x": not a duration`},
		{spec: "1s abcd", wantErr: `entry 2 "abcd": not a duration`},
		{spec: "99999999999d", wantErr: `out of range`},
	} {
		got, err := ParseSpec(tc.spec)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("ParseSpec(%q) err = %v, want containing %q", tc.spec, err, tc.wantErr)
			}
			continue
		}
		if err != nil {
			t.Errorf("ParseSpec(%q): %v", tc.spec, err)
			continue
		}
		if len(got) != len(tc.want) {
			t.Errorf("ParseSpec(%q) = %v, want %v", tc.spec, got, tc.want)
			continue
		}
		for i := range got {
			if got[i] != tc.want[i] {
				t.Errorf("ParseSpec(%q)[%d] = %s, want %s", tc.spec, i, got[i], tc.want[i])
			}
		}
	}
}

func TestNewRejects(t *testing.T) {
	if _, err := New(nil, 1); err == nil {
		t.Error("New(nil) succeeded")
	}
	if _, err := New([]time.Duration{time.Second}, 0); err == nil {
		t.Error("New(perLevel 0) succeeded")
	}
	if _, err := New([]time.Duration{2 * time.Second, time.Second}, 1); err == nil {
		t.Error("New(decreasing) succeeded")
	}
	if _, err := New([]time.Duration{time.Second}, MaxPartitions+1); err == nil {
		t.Error("New(too many partitions) succeeded")
	}
}

func TestMapping(t *testing.T) {
	tab, err := Parse("1s 2s 4s 8s", 3)
	if err != nil {
		t.Fatal(err)
	}
	if got := tab.Partitions(); got != 12 {
		t.Fatalf("Partitions() = %d, want 12", got)
	}
	for _, tc := range []struct {
		p    int32
		want int
	}{{0, 1}, {2, 1}, {3, 2}, {11, 4}, {12, 0}, {-1, 0}} {
		if got := tab.LevelOf(tc.p); got != tc.want {
			t.Errorf("LevelOf(%d) = %d, want %d", tc.p, got, tc.want)
		}
	}
	for _, tc := range []struct {
		level    int
		from, to int32
	}{{1, 0, 3}, {2, 3, 6}, {4, 9, 12}} {
		from, to := tab.Range(tc.level)
		if from != tc.from || to != tc.to {
			t.Errorf("Range(%d) = [%d,%d), want [%d,%d)", tc.level, from, to, tc.from, tc.to)
		}
	}
	for _, tc := range []struct {
		delay time.Duration
		want  int
	}{
		{0, 1}, {500 * time.Millisecond, 1}, {time.Second, 1}, {1999 * time.Millisecond, 1},
		{2 * time.Second, 2}, {7 * time.Second, 3}, {8 * time.Second, 4}, {time.Hour, 4}, {-time.Second, 1},
	} {
		if got := tab.LevelFor(tc.delay); got != tc.want {
			t.Errorf("LevelFor(%s) = %d, want %d", tc.delay, got, tc.want)
		}
	}
	if got, want := tab.MaxGap(), 4*time.Second; got != want {
		t.Errorf("MaxGap() = %s, want %s", got, want)
	}
	if got, want := Default().MaxGap(), time.Hour; got != want {
		t.Errorf("default MaxGap() = %s, want %s", got, want)
	}
}

func TestPartitionFor(t *testing.T) {
	tab, err := Parse("1s 2s 4s", 4)
	if err != nil {
		t.Fatal(err)
	}
	// The same key always lands on the same partition, inside its level.
	for level := 1; level <= 3; level++ {
		from, to := tab.Range(level)
		for _, key := range []string{"a", "order-17", "", "some longer key of 33 bytes ....."} {
			p := tab.PartitionFor(level, []byte(key))
			if p < from || p >= to {
				t.Errorf("PartitionFor(%d, %q) = %d, outside [%d,%d)", level, key, p, from, to)
			}
			if again := tab.PartitionFor(level, []byte(key)); again != p {
				t.Errorf("PartitionFor(%d, %q) not stable: %d then %d", level, key, p, again)
			}
		}
		for range 50 {
			if p := tab.PartitionFor(level, nil); p < from || p >= to {
				t.Errorf("PartitionFor(%d, nil) = %d, outside [%d,%d)", level, p, from, to)
			}
		}
	}
	// Out-of-range levels are clamped.
	if p := tab.PartitionFor(0, []byte("k")); p < 0 || p >= 4 {
		t.Errorf("PartitionFor(0) = %d, want level 1's range", p)
	}
	if p := tab.PartitionFor(9, []byte("k")); p < 8 || p >= 12 {
		t.Errorf("PartitionFor(9) = %d, want level 3's range", p)
	}
}

// TestMurmur2 checks the hash against values of Kafka's Java client
// (Utils.murmur2), as franz-go's partitioner tests also use.
func TestMurmur2(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int32
	}{
		{"21", -973932308},
		{"foobar", -790332482},
		{"a-little-bit-long-string", -985981536},
		{"a-little-bit-longer-string", -1486304829},
		{"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58897971},
		{"abc", 479470107},
	} {
		if got := int32(murmur2([]byte(tc.in))); got != tc.want {
			t.Errorf("murmur2(%q) = %d, want %d", tc.in, got, tc.want)
		}
	}
}
