package levels

import (
	"errors"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

func hdrs(kv ...string) []kgo.RecordHeader {
	var hs []kgo.RecordHeader
	for i := 0; i+1 < len(kv); i += 2 {
		hs = append(hs, kgo.RecordHeader{Key: kv[i], Value: []byte(kv[i+1])})
	}
	return hs
}

func TestParseHeaders(t *testing.T) {
	tab, err := Parse("1s 2s 4s 8s", 1)
	if err != nil {
		t.Fatal(err)
	}
	ts := time.UnixMilli(1_700_000_000_000)
	at := time.UnixMilli(1_700_000_123_456)
	for _, tc := range []struct {
		name    string
		hs      []kgo.RecordHeader
		wantDue time.Time
		wantP   int32
		wantErr error
	}{
		{name: "delay duration", hs: hdrs(HeaderTarget, "orders", HeaderDelay, "90s"), wantDue: ts.Add(90 * time.Second), wantP: -1},
		{name: "delay ms", hs: hdrs(HeaderTarget, "orders", HeaderDelay, "1500"), wantDue: ts.Add(1500 * time.Millisecond), wantP: -1},
		{name: "delay zero", hs: hdrs(HeaderTarget, "orders", HeaderDelay, "0"), wantDue: ts, wantP: -1},
		{name: "sub-ms delay rounds up", hs: hdrs(HeaderTarget, "orders", HeaderDelay, "1.2ms"), wantDue: ts.Add(2 * time.Millisecond), wantP: -1},
		{name: "deliver-at ms", hs: hdrs(HeaderTarget, "orders", HeaderDeliverAt, "1700000123456"), wantDue: at, wantP: -1},
		{name: "deliver-at rfc3339", hs: hdrs(HeaderTarget, "orders", HeaderDeliverAt, at.UTC().Format(time.RFC3339Nano)), wantDue: at, wantP: -1},
		{name: "deliver-at wins", hs: hdrs(HeaderTarget, "orders", HeaderDelay, "1s", HeaderDeliverAt, "1700000123456"), wantDue: at, wantP: -1},
		{name: "delay wins over level", hs: hdrs(HeaderTarget, "orders", HeaderLevel, "4", HeaderDelay, "3s"), wantDue: ts.Add(3 * time.Second), wantP: -1},
		{name: "level", hs: hdrs(HeaderTarget, "orders", HeaderLevel, "3"), wantDue: ts.Add(4 * time.Second), wantP: -1},
		{name: "last header counts", hs: hdrs(HeaderTarget, "a", HeaderTarget, "b", HeaderDelay, "1s"), wantDue: ts.Add(time.Second), wantP: -1},
		{name: "target partition", hs: hdrs(HeaderTarget, "orders", HeaderDelay, "1s", HeaderTargetPartition, "7"), wantDue: ts.Add(time.Second), wantP: 7},

		{name: "missing target", hs: hdrs(HeaderDelay, "1s"), wantErr: ErrMissingTarget},
		{name: "empty target", hs: hdrs(HeaderTarget, "", HeaderDelay, "1s"), wantErr: ErrMissingTarget},
		{name: "bad target", hs: hdrs(HeaderTarget, "a b", HeaderDelay, "1s"), wantErr: ErrBadTarget},
		{name: "bad delay", hs: hdrs(HeaderTarget, "orders", HeaderDelay, "soon"), wantErr: ErrBadDelay},
		{name: "huge delay", hs: hdrs(HeaderTarget, "orders", HeaderDelay, "9223372036854775807"), wantErr: ErrBadDelay},
		{name: "negative delay", hs: hdrs(HeaderTarget, "orders", HeaderDelay, "-5s"), wantErr: ErrNegativeDelay},
		{name: "negative delay ms", hs: hdrs(HeaderTarget, "orders", HeaderDelay, "-5"), wantErr: ErrNegativeDelay},
		{name: "level zero", hs: hdrs(HeaderTarget, "orders", HeaderLevel, "0"), wantErr: ErrLevelOutOfRange},
		{name: "level too high", hs: hdrs(HeaderTarget, "orders", HeaderLevel, "5"), wantErr: ErrLevelOutOfRange},
		{name: "level not a number", hs: hdrs(HeaderTarget, "orders", HeaderLevel, "two"), wantErr: ErrLevelOutOfRange},
		{name: "bad deliver-at", hs: hdrs(HeaderTarget, "orders", HeaderDeliverAt, "tomorrow"), wantErr: ErrBadDeliverAt},
		{name: "negative deliver-at", hs: hdrs(HeaderTarget, "orders", HeaderDeliverAt, "-1"), wantErr: ErrBadDeliverAt},
		{name: "no schedule", hs: hdrs(HeaderTarget, "orders"), wantErr: ErrNoSchedule},
		{name: "bad target partition", hs: hdrs(HeaderTarget, "orders", HeaderDelay, "1s", HeaderTargetPartition, "-1"), wantErr: ErrBadPartition},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := tab.Parse(tc.hs, ts)
			if tc.wantErr != nil {
				var ce *ContractError
				if !errors.Is(err, tc.wantErr) || !errors.As(err, &ce) {
					t.Fatalf("err = %v, want %v as *ContractError", err, tc.wantErr)
				}
				if Reason(err) == "other" {
					t.Errorf("Reason(%v) = other", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !s.Due.Equal(tc.wantDue) {
				t.Errorf("Due = %s, want %s", s.Due, tc.wantDue)
			}
			if s.TargetPartition != tc.wantP {
				t.Errorf("TargetPartition = %d, want %d", s.TargetPartition, tc.wantP)
			}
			if s.Delay != s.Due.Sub(ts) {
				t.Errorf("Delay = %s, want Due-ts = %s", s.Delay, s.Due.Sub(ts))
			}
		})
	}
}

func TestErrorNamesHeaderAndValue(t *testing.T) {
	_, err := Default().Parse(hdrs(HeaderTarget, "t", HeaderDelay, "soon"), time.Now())
	if got, want := err.Error(), `levels: invalid delay: header kdelay-delay="soon"`; got != want {
		t.Fatalf("err = %q, want %q", got, want)
	}
}

func TestForwardHeaders(t *testing.T) {
	in := hdrs("trace", "abc", HeaderTarget, "orders", HeaderDelay, "5s", "x", "1", HeaderTargetPartition, "2", HeaderDueAt, "old")
	due := time.UnixMilli(42)
	out := ForwardHeaders(in, due, "delay-topic/3/17")
	want := hdrs("trace", "abc", "x", "1", HeaderDueAt, "42", HeaderSource, "delay-topic/3/17")
	if !equalHeaders(out, want) {
		t.Fatalf("ForwardHeaders = %v, want %v", out, want)
	}
	if len(in) != 6 || in[1].Key != HeaderTarget {
		t.Fatal("ForwardHeaders modified its input")
	}
}

func TestDeadLetterHeaders(t *testing.T) {
	in := hdrs("trace", "abc", HeaderTarget, "__consumer_offsets", HeaderError, "old")
	out := DeadLetterHeaders(in, "target refused", "delay-topic/0/1")
	want := hdrs("trace", "abc", HeaderTarget, "__consumer_offsets", HeaderError, "target refused", HeaderSource, "delay-topic/0/1")
	if !equalHeaders(out, want) {
		t.Fatalf("DeadLetterHeaders = %v, want %v", out, want)
	}
}

func TestCascadeHeaders(t *testing.T) {
	in := hdrs("trace", "abc", HeaderTarget, "orders", HeaderDelay, "5h", HeaderLevel, "2")
	due := time.UnixMilli(1_700_000_000_000)
	out := CascadeHeaders(in, due)
	want := hdrs("trace", "abc", HeaderTarget, "orders", HeaderDeliverAt, "1700000000000")
	if !equalHeaders(out, want) {
		t.Fatalf("CascadeHeaders = %v, want %v", out, want)
	}
	s, err := Default().Parse(out, time.UnixMilli(0))
	if err != nil || !s.Due.Equal(due) {
		t.Fatalf("cascaded record parses to %v, %v; want due %s", s.Due, err, due)
	}
}

func TestStamp(t *testing.T) {
	tab, err := Parse("1s 2s 4s 8s", 2)
	if err != nil {
		t.Fatal(err)
	}
	now := time.UnixMilli(1_000_000)
	p := int32(3)
	for _, tc := range []struct {
		name      string
		d         Delay
		wantLevel int
		wantDue   time.Time
	}{
		{"delay", Delay{Target: "t", Delay: 3 * time.Second}, 2, now.Add(3 * time.Second)},
		{"short delay", Delay{Target: "t", Delay: 10 * time.Millisecond}, 1, now.Add(10 * time.Millisecond)},
		{"at", Delay{Target: "t", At: now.Add(9 * time.Second), Partition: &p}, 4, now.Add(9 * time.Second)},
		{"level", Delay{Target: "t", Level: 3}, 3, now.Add(4 * time.Second)},
		{"zero delay", Delay{Target: "t"}, 1, now},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := &kgo.Record{Key: []byte("k"), Headers: hdrs("own", "1")}
			if err := tab.Stamp(r, "delays", tc.d, now); err != nil {
				t.Fatal(err)
			}
			if r.Topic != "delays" || !r.Timestamp.Equal(now) {
				t.Errorf("topic/timestamp = %q/%s", r.Topic, r.Timestamp)
			}
			if got := tab.LevelOf(r.Partition); got != tc.wantLevel {
				t.Errorf("partition %d is level %d, want %d", r.Partition, got, tc.wantLevel)
			}
			s, err := tab.Parse(r.Headers, r.Timestamp)
			if err != nil {
				t.Fatal(err)
			}
			if !s.Due.Equal(tc.wantDue) || s.Target != "t" {
				t.Errorf("parsed %+v, want due %s", s, tc.wantDue)
			}
			if tc.d.Partition != nil && s.TargetPartition != *tc.d.Partition {
				t.Errorf("target partition %d, want %d", s.TargetPartition, *tc.d.Partition)
			}
			if r.Headers[0].Key != "own" {
				t.Error("own header lost")
			}
		})
	}
	for _, bad := range []Delay{
		{Target: "", Delay: time.Second},
		{Target: "t", Delay: time.Second, Level: 1},
		{Target: "t", Level: 9},
		{Target: "t", Delay: -time.Second},
	} {
		if err := tab.Stamp(&kgo.Record{}, "delays", bad, now); err == nil {
			t.Errorf("Stamp(%+v) succeeded", bad)
		}
	}
}

func equalHeaders(a, b []kgo.RecordHeader) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].Key != b[i].Key || string(a[i].Value) != string(b[i].Value) {
			return false
		}
	}
	return true
}

func TestCascadeHeadersAt(t *testing.T) {
	in := hdrs(HeaderTarget, "orders", HeaderDelay, "5h", HeaderID, "o-1")
	due, ts := time.UnixMilli(1_700_000_000_000), time.UnixMilli(1_600_000_000_000)
	first := CascadeHeadersAt(in, due, ts)
	if got := OriginalTimestamp(first, time.UnixMilli(5)); !got.Equal(ts) {
		t.Errorf("first cascade: original timestamp %s, want %s", got, ts)
	}
	again := CascadeHeadersAt(first, due, time.UnixMilli(1_650_000_000_000)) // a later cascade keeps the first
	if got := OriginalTimestamp(again, time.UnixMilli(5)); !got.Equal(ts) || len(again) != len(first) {
		t.Errorf("second cascade: original timestamp %s (%d headers), want %s (%d)", got, len(again), ts, len(first))
	}
	if got := OriginalTimestamp(in, time.UnixMilli(5)); !got.Equal(time.UnixMilli(5)) {
		t.Errorf("never cascaded: %s, want the record timestamp", got)
	}
	if ID(again) != "o-1" {
		t.Errorf("ID after cascades = %q", ID(again))
	}
}

func TestCancelReplace(t *testing.T) {
	tab := Default()
	now := time.UnixMilli(1_700_000_000_000).Add(300 * time.Microsecond)
	c, err := Cancel("d.cancel", "o-1", time.Time{}, now)
	if err != nil || c.Topic != "d.cancel" || string(c.Key) != "o-1" || c.Value == nil || len(c.Headers) != 0 {
		t.Fatalf("Cancel = %+v, %v", c, err)
	}
	if _, err := Cancel("d.cancel", strings.Repeat("i", 256), time.Time{}, now); err == nil {
		t.Error("Cancel accepted an id of 256 bytes")
	}
	r := &kgo.Record{Key: []byte("k"), Timestamp: now.Add(-time.Hour)}
	c, err = tab.Replace(r, "delay-topic", "d.cancel", "o-1", Delay{Target: "orders", Delay: time.Minute}, now)
	if err != nil {
		t.Fatal(err)
	}
	cut, _ := lastHeader(c.Headers, HeaderCancelBefore)
	if want := "1700000000001"; cut != want {
		t.Errorf("cut-off %s, want %s (now rounded up)", cut, want)
	}
	if r.Timestamp.UnixMilli() != 1_700_000_000_001 || ID(r.Headers) != "o-1" {
		t.Errorf("new record: timestamp %d, id %q", r.Timestamp.UnixMilli(), ID(r.Headers))
	}
	// The new record is not before the cut-off; one stamped at now is.
	if !(r.Timestamp.UnixMilli() >= 1_700_000_000_001 && now.UnixMilli() < 1_700_000_000_001) {
		t.Error("cut-off does not separate the old record from the new one")
	}
	s, err := tab.Parse(r.Headers, r.Timestamp)
	if err != nil || s.ID != "o-1" || !s.Due.Equal(r.Timestamp.Add(time.Minute)) {
		t.Errorf("replaced record parses to %+v, %v", s, err)
	}
	if err := tab.Stamp(&kgo.Record{}, "delay-topic", Delay{Target: "orders", ID: strings.Repeat("i", 256)}, now); err == nil {
		t.Error("Stamp accepted an id of 256 bytes")
	}
}

// TestTarget: Target reads a record's target and partition as Parse
// does, errors included; a target read before costs Parse no allocation,
// from any number of goroutines, and more distinct targets than the table
// keeps still read right.
func TestTarget(t *testing.T) {
	tab := Default()
	for _, hs := range [][]kgo.RecordHeader{
		hdrs(HeaderTarget, "orders", HeaderDelay, "1s"),
		hdrs(HeaderTarget, "orders", HeaderTargetPartition, " 3 ", HeaderDelay, "1s"),
		hdrs(HeaderTarget, "a", HeaderTarget, "b", HeaderDelay, "1s"),
		hdrs(HeaderDelay, "1s"),
		hdrs(HeaderTarget, "", HeaderDelay, "1s"),
		hdrs(HeaderTarget, "bad name", HeaderDelay, "1s"),
		hdrs(HeaderTarget, "orders", HeaderTargetPartition, "-1", HeaderDelay, "1s"),
		hdrs(HeaderTarget, "orders", HeaderTargetPartition, "x", HeaderDelay, "1s"),
	} {
		s, perr := tab.Parse(hs, time.UnixMilli(1000))
		target, p, terr := tab.Target(hs)
		if perr != nil {
			if terr == nil || terr.Error() != perr.Error() {
				t.Errorf("%v: Target error %v, Parse error %v", hs, terr, perr)
			}
			continue
		}
		if terr != nil || target != s.Target || p != s.TargetPartition {
			t.Errorf("%v: Target %q %d %v, Parse %q %d", hs, target, p, terr, s.Target, s.TargetPartition)
		}
	}

	hs := hdrs(HeaderTarget, "orders", HeaderDeliverAt, "1003500")
	if allocs := testing.AllocsPerRun(100, func() {
		if s, err := tab.Parse(hs, time.UnixMilli(1000)); err != nil || s.Target != "orders" {
			t.Fatal(s, err)
		}
	}); allocs != 0 {
		t.Errorf("Parse of a known target: %v allocations, want 0", allocs)
	}

	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 2 * maxTargets {
				name := "t" + strconv.Itoa(g) + "-" + strconv.Itoa(i)
				got, _, err := tab.Target(hdrs(HeaderTarget, name))
				if err != nil || got != name {
					t.Errorf("Target of %s: %q, %v", name, got, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if n := len(*tab.targets.Load()); n > maxTargets {
		t.Errorf("%d targets kept, at most %d", n, maxTargets)
	}
}
