package levels

import (
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// FuzzParseLevels: a list that parses is strictly increasing and positive,
// and its table maps every partition back to a level.
func FuzzParseLevels(f *testing.F) {
	for _, s := range []string{DefaultSpec, "1s 2s 4s", "1d", "", "1s 1s", "0s", "-1m 2m", "1h,2h,1d", "5x", "9999999999d"} {
		f.Add(s, 1)
	}
	f.Add("1s 2s", 7)
	f.Fuzz(func(t *testing.T, spec string, perLevel int) {
		durs, err := ParseSpec(spec)
		if err != nil {
			if !strings.Contains(err.Error(), "levels:") {
				t.Fatalf("error without context: %v", err)
			}
			return
		}
		for i, d := range durs {
			if d <= 0 {
				t.Fatalf("entry %d = %s not positive", i, d)
			}
			if i > 0 && d <= durs[i-1] {
				t.Fatalf("entry %d = %s not above %s", i, d, durs[i-1])
			}
		}
		tab, err := New(durs, perLevel%64)
		if err != nil {
			return
		}
		for p := int32(0); p < tab.Partitions(); p++ {
			l := tab.LevelOf(p)
			from, to := tab.Range(l)
			if p < from || p >= to {
				t.Fatalf("partition %d maps to level %d with range [%d,%d)", p, l, from, to)
			}
		}
	})
}

// FuzzParseHeaders: a record that parses has a target and, without an
// absolute due time, a due time never before its timestamp; every rewrite
// leaves no control header behind.
func FuzzParseHeaders(f *testing.F) {
	f.Add("orders", "90s", "", "", "", int64(1_700_000_000_000))
	f.Add("orders", "1500", "", "", "3", int64(0))
	f.Add("orders", "", "1700000123456", "", "", int64(1_700_000_000_000))
	f.Add("orders", "", "2026-01-02T03:04:05.678Z", "", "", int64(1_700_000_000_000))
	f.Add("orders", "", "", "18", "", int64(1))
	f.Add("", "1s", "", "", "", int64(1))
	f.Add("orders", "-1s", "", "", "", int64(1))
	f.Add("orders", "9223372036854775807", "", "", "", int64(9_000_000_000_000))
	f.Add("a b", "1s", "", "", "x", int64(5))
	f.Fuzz(func(t *testing.T, target, delay, at, level, part string, tsMs int64) {
		tab := Default()
		var hs []kgo.RecordHeader
		add := func(k, v string) {
			if v != "" {
				hs = append(hs, kgo.RecordHeader{Key: k, Value: []byte(v)})
			}
		}
		add("own", "x")
		add(HeaderTarget, target)
		add(HeaderDelay, delay)
		add(HeaderDeliverAt, at)
		add(HeaderLevel, level)
		add(HeaderTargetPartition, part)
		ts := time.UnixMilli(tsMs % (1 << 50))
		s, err := tab.Parse(hs, ts)
		if err != nil {
			if Reason(err) == "other" {
				t.Fatalf("unclassified error %v", err)
			}
		} else {
			if s.Target == "" {
				t.Fatal("parsed without a target")
			}
			if at == "" && s.Due.Before(ts) {
				t.Fatalf("due %s before timestamp %s with delay %q level %q", s.Due, ts, delay, level)
			}
			if s.Due.Sub(s.Due.Truncate(time.Millisecond)) != 0 {
				t.Fatalf("due %s not at millisecond precision", s.Due)
			}
		}
		fw := ForwardHeaders(hs, s.Due, "t/0/0")
		for _, h := range fw {
			if IsControl(h.Key) && h.Key != HeaderDueAt && h.Key != HeaderSource {
				t.Fatalf("forwarded record keeps control header %s", h.Key)
			}
		}
		if fw[0].Key != "own" {
			t.Fatal("forwarded record lost the producer's header")
		}
		dl := DeadLetterHeaders(hs, "reason", "t/0/0")
		if len(dl) != len(hs)+2 {
			t.Fatalf("dead letter has %d headers, want %d", len(dl), len(hs)+2)
		}
		if err == nil {
			cs, cerr := tab.Parse(CascadeHeaders(hs, s.Due), ts)
			if cerr != nil || !cs.Due.Equal(s.Due) {
				t.Fatalf("cascade changes due time: %v %v -> %v", cerr, s.Due, cs.Due)
			}
		}
	})
}
