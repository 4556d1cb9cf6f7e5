package levels

import (
	"strconv"
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

// FuzzParseHeaders: a record that parses has a target, and exactly the due
// time wantDue computes by the contract (deliver-at wins, else timestamp +
// delay, else timestamp + the level's duration); every rewrite leaves no
// control header behind.
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
			if tgt, p, err := tab.Target(hs); err != nil || tgt != s.Target || p != s.TargetPartition {
				t.Fatalf("Target: %q %d %v, Parse: %q %d", tgt, p, err, s.Target, s.TargetPartition)
			}
			if at == "" && s.Due.Before(ts) {
				t.Fatalf("due %s before timestamp %s with delay %q level %q", s.Due, ts, delay, level)
			}
			if s.Due.Sub(s.Due.Truncate(time.Millisecond)) != 0 {
				t.Fatalf("due %s not at millisecond precision", s.Due)
			}
			if want, ok := wantDue(tab, delay, at, level, ts); !ok {
				t.Fatalf("parsed (due %s) headers the oracle refuses: delay %q at %q level %q", s.Due, delay, at, level)
			} else if !s.Due.Equal(want) {
				t.Fatalf("due %s (%d ms), want %s (%d ms): delay %q at %q level %q ts %d", s.Due, s.Due.UnixMilli(), want, want.UnixMilli(), delay, at, level, ts.UnixMilli())
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

// wantDue is the contract's due time, computed apart from Parse: the
// kdelay-deliver-at value (epoch ms, or RFC 3339 rounded up to the ms);
// else ts + kdelay-delay (whole ms, or a Go duration rounded up to the ms);
// else ts + the level's duration; a due time before 1970 is 1970. ok is
// false when no header gives a schedule the oracle accepts.
func wantDue(tab *Table, delay, at, level string, ts time.Time) (due time.Time, ok bool) {
	delay, at, level = strings.TrimSpace(delay), strings.TrimSpace(at), strings.TrimSpace(level)
	ceilMs := func(ns int64) int64 { // ns >= 0
		return (ns + int64(time.Millisecond) - 1) / int64(time.Millisecond)
	}
	if at != "" {
		if ms, err := strconv.ParseInt(at, 10, 64); err == nil {
			return time.UnixMilli(ms), ms >= 0
		}
		a, err := time.Parse(time.RFC3339Nano, at)
		if err != nil {
			return time.Time{}, false
		}
		ms := a.UnixMilli()
		if a.Before(time.UnixMilli(ms)) { // UnixMilli truncates toward zero
			ms--
		}
		if time.UnixMilli(ms).Before(a) {
			ms++
		}
		return time.UnixMilli(ms), true
	}
	var addMs int64
	switch {
	case delay != "":
		if ms, err := strconv.ParseInt(delay, 10, 64); err == nil {
			addMs = ms
		} else if d, err := time.ParseDuration(delay); err == nil {
			addMs = ceilMs(int64(d))
		} else {
			return time.Time{}, false
		}
	case level != "":
		n, err := strconv.Atoi(level)
		if err != nil || n < 1 || n > tab.Levels() {
			return time.Time{}, false
		}
		addMs = tab.Duration(n).Milliseconds()
	default:
		return time.Time{}, false
	}
	if addMs < 0 {
		return time.Time{}, false
	}
	return time.UnixMilli(max(ts.UnixMilli()+addMs, 0)), true
}
