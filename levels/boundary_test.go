package levels

import (
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Tests at the exact edges of every limit of the contract: the last value
// accepted and the first refused (go-gremlins' boundary mutants, see
// docs/dev/ci.md, "Mutation testing").

func TestValidTopicNameEdges(t *testing.T) {
	for _, tc := range []struct {
		name string
		ok   bool
	}{
		{strings.Repeat("a", 249), true},
		{strings.Repeat("a", 250), false},
		{"a", true}, {"z", true}, {"A", true}, {"Z", true}, {"0", true}, {"9", true},
		{"x.y", true}, {"x_y", true}, {"x-y", true}, {"...", true},
		{"", false}, {".", false}, {"..", false},
		// the neighbours of each accepted range
		{"`", false}, {"{", false}, {"@", false}, {"[", false}, {"/", false}, {":", false},
		{"a b", false}, {"é", false},
	} {
		if err := ValidTopicName(tc.name); (err == nil) != tc.ok {
			t.Errorf("ValidTopicName(%.20q) = %v, want ok=%v", tc.name, err, tc.ok)
		}
	}
}

func TestParseScheduleEdges(t *testing.T) {
	tab := Default()
	ts := time.UnixMilli(0)
	maxMs := int64(maxDelay / time.Millisecond)
	maxAt := maxDeliverAtMs
	for _, tc := range []struct {
		header, value string
		wantDue       int64  // epoch ms, when accepted
		reason        string // "" when accepted
	}{
		{HeaderDelay, strconv.FormatInt(maxMs, 10), maxMs, ""},
		{HeaderDelay, strconv.FormatInt(maxMs+1, 10), 0, "bad_delay"},
		{HeaderDelay, strconv.FormatInt(-maxMs, 10), 0, "negative_delay"},
		{HeaderDelay, strconv.FormatInt(-maxMs-1, 10), 0, "bad_delay"},
		{HeaderDelay, "0", 0, ""},
		{HeaderDelay, "-1", 0, "negative_delay"},
		{HeaderDelay, maxDelay.String(), maxMs, ""},
		{HeaderDelay, (maxDelay + time.Nanosecond).String(), 0, "bad_delay"},
		{HeaderDelay, (-maxDelay).String(), 0, "negative_delay"},
		{HeaderDelay, (-maxDelay - time.Nanosecond).String(), 0, "bad_delay"},
		{HeaderDelay, "1ns", 1, ""}, // rounded up, never early
		{HeaderDeliverAt, "0", 0, ""},
		{HeaderDeliverAt, "-1", 0, "bad_deliver_at"},
		{HeaderDeliverAt, strconv.FormatInt(maxAt, 10), maxAt, ""},
		{HeaderDeliverAt, strconv.FormatInt(maxAt+1, 10), 0, "bad_deliver_at"},
		{HeaderDeliverAt, "1970-01-01T00:00:00Z", 0, ""},
		{HeaderDeliverAt, "1969-12-31T23:59:59.999Z", 0, "bad_deliver_at"},
		{HeaderDeliverAt, "9999-12-31T00:00:00Z", maxAt, ""},
		{HeaderDeliverAt, "9999-12-31T00:00:00.001Z", 0, "bad_deliver_at"},
		{HeaderLevel, "1", 1000, ""},
		{HeaderLevel, "0", 0, "level_out_of_range"},
		{HeaderLevel, strconv.Itoa(tab.Levels()), tab.Duration(tab.Levels()).Milliseconds(), ""},
		{HeaderLevel, strconv.Itoa(tab.Levels() + 1), 0, "level_out_of_range"},
		{HeaderTargetPartition, "0", -1, ""}, // with no schedule header: see below
	} {
		hs := []kgo.RecordHeader{{Key: HeaderTarget, Value: []byte("orders")}, {Key: tc.header, Value: []byte(tc.value)}}
		if tc.header == HeaderTargetPartition {
			hs = append(hs, kgo.RecordHeader{Key: HeaderDelay, Value: []byte("1")})
			tc.wantDue = 1
		}
		s, err := tab.Parse(hs, ts)
		switch {
		case tc.reason != "":
			if err == nil || Reason(err) != tc.reason {
				t.Errorf("%s=%s: err %v, want reason %s", tc.header, tc.value, err, tc.reason)
			}
		case err != nil:
			t.Errorf("%s=%s: %v, want accepted", tc.header, tc.value, err)
		case s.Due.UnixMilli() != tc.wantDue:
			t.Errorf("%s=%s: due %d, want %d", tc.header, tc.value, s.Due.UnixMilli(), tc.wantDue)
		}
	}
	// A negative timestamp plus a small delay is due at once (1970), not refused.
	s, err := tab.Parse([]kgo.RecordHeader{{Key: HeaderTarget, Value: []byte("t")}, {Key: HeaderDelay, Value: []byte("5")}}, time.UnixMilli(-10))
	if err != nil || s.Due.UnixMilli() != 0 {
		t.Errorf("ts -10ms + 5ms: due %v, err %v; want 0", s.Due.UnixMilli(), err)
	}
	s, err = tab.Parse([]kgo.RecordHeader{{Key: HeaderTarget, Value: []byte("t")}, {Key: HeaderDelay, Value: []byte("10")}}, time.UnixMilli(-10))
	if err != nil || s.Due.UnixMilli() != 0 {
		t.Errorf("ts -10ms + 10ms: due %v, err %v; want 0", s.Due.UnixMilli(), err)
	}
	// The largest delay on the largest timestamp: past year 9999, refused.
	if _, err := tab.Parse([]kgo.RecordHeader{{Key: HeaderTarget, Value: []byte("t")}, {Key: HeaderDelay, Value: []byte("1")}}, time.UnixMilli(maxAt)); Reason(err) != "bad_delay" {
		t.Errorf("due past year 9999: %v, want bad_delay", err)
	}
	if s, err := tab.Parse([]kgo.RecordHeader{{Key: HeaderTarget, Value: []byte("t")}, {Key: HeaderDelay, Value: []byte("0")}}, time.UnixMilli(maxAt)); err != nil || s.Due.UnixMilli() != maxAt {
		t.Errorf("due at the last ms allowed: %v %v", s.Due.UnixMilli(), err)
	}
}

func TestTableEdges(t *testing.T) {
	maxDays := int64(1<<63-1) / int64(24*time.Hour)
	if d, err := ParseSpec(strconv.FormatInt(maxDays, 10) + "d"); err != nil || d[0] != time.Duration(maxDays)*24*time.Hour {
		t.Errorf("ParseSpec(%dd) = %v, %v; want accepted", maxDays, d, err)
	}
	if _, err := ParseSpec(strconv.FormatInt(maxDays+1, 10) + "d"); err == nil {
		t.Errorf("ParseSpec(%dd) accepted: overflows", maxDays+1)
	}
	// The negative edge: refused either way, but for its own reason.
	if _, err := ParseSpec("-" + strconv.FormatInt(maxDays, 10) + "d"); err == nil || !strings.Contains(err.Error(), "must be positive") {
		t.Errorf("ParseSpec(-%dd) = %v, want \"must be positive\"", maxDays, err)
	}
	if _, err := ParseSpec("-" + strconv.FormatInt(maxDays+1, 10) + "d"); err == nil || !strings.Contains(err.Error(), "out of range") {
		t.Errorf("ParseSpec(-%dd) = %v, want \"out of range\"", maxDays+1, err)
	}
	if _, err := New([]time.Duration{0}, 1); !errors.Is(err, ErrSpec) {
		t.Errorf("New(0s) = %v, want ErrSpec", err)
	}
	if _, err := New([]time.Duration{time.Second, time.Second}, 1); err == nil || !strings.Contains(err.Error(), "entry 2") {
		t.Errorf("New(1s 1s) = %v, want an error naming entry 2", err)
	}
	if _, err := New([]time.Duration{time.Millisecond}, 1); err != nil {
		t.Errorf("New(1ms) = %v", err)
	}
	if _, err := New([]time.Duration{time.Second, 2 * time.Second}, MaxPartitions/2); err != nil {
		t.Errorf("2 levels x %d = MaxPartitions: %v", MaxPartitions/2, err)
	}
	if _, err := New([]time.Duration{time.Second, 2 * time.Second}, MaxPartitions/2+1); err == nil {
		t.Errorf("2 levels x %d > MaxPartitions accepted", MaxPartitions/2+1)
	}
	tab, err := New([]time.Duration{time.Second, 2 * time.Second, 4 * time.Second}, 1)
	if err != nil {
		t.Fatal(err)
	}
	for level, want := range map[int]time.Duration{0: 0, 1: time.Second, 3: 4 * time.Second, 4: 0} {
		if got := tab.Duration(level); got != want {
			t.Errorf("Duration(%d) = %s, want %s", level, got, want)
		}
	}
	now := time.Now()
	for _, tc := range []struct {
		d  Delay
		ok bool
	}{
		{Delay{Target: "t", Level: 1}, true},
		{Delay{Target: "t", Level: 3}, true},
		{Delay{Target: "t", Level: 4}, false},
		{Delay{Target: "t", Level: -1}, false},
		{Delay{Target: "t", Delay: 0}, true},
		{Delay{Target: "t", Delay: time.Second, Partition: new(int32)}, true},
		{Delay{Target: "t", At: now.Add(time.Second)}, true},
		{Delay{Target: "t", Delay: time.Second, At: now}, false}, // at most one of the three
		{Delay{Target: "t", At: now, Level: 1}, false},
		{Delay{Target: "t", Delay: time.Second, Level: 1}, false},
		{Delay{Target: "t", Delay: time.Second, Partition: func() *int32 { p := int32(-1); return &p }()}, false},
	} {
		r := &kgo.Record{}
		if err := tab.Stamp(r, "delays", tc.d, now); (err == nil) != tc.ok {
			t.Errorf("Stamp(%+v) = %v, want ok=%v", tc.d, err, tc.ok)
		}
	}
}

// TestRewritesOfFewHeaders: the rewrites of a record with no header, or
// one, still add exactly their own.
func TestRewritesOfFewHeaders(t *testing.T) {
	due := time.UnixMilli(1234)
	for _, hs := range [][]kgo.RecordHeader{nil, {{Key: "own", Value: []byte("x")}}} {
		if got := ForwardHeaders(hs, due, "t/0/1"); len(got) != len(hs)+2 || got[len(got)-2].Key != HeaderDueAt || string(got[len(got)-1].Value) != "t/0/1" {
			t.Errorf("ForwardHeaders(%d headers) = %v", len(hs), got)
		}
		if got := DeadLetterHeaders(hs, "why", "t/0/1"); len(got) != len(hs)+2 || string(got[len(got)-2].Value) != "why" {
			t.Errorf("DeadLetterHeaders(%d headers) = %v", len(hs), got)
		}
		if got := CascadeHeaders(hs, due); len(got) != len(hs)+1 || string(got[len(got)-1].Value) != "1234" {
			t.Errorf("CascadeHeaders(%d headers) = %v", len(hs), got)
		}
	}
}
