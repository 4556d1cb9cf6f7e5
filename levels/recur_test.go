package levels

import (
	"errors"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

func mustSeries(t *testing.T, kv ...string) *Recurrence {
	t.Helper()
	s, err := Default().Parse(hdrs(append([]string{HeaderTarget, "out", HeaderID, "s1"}, kv...)...), time.UnixMilli(0))
	if err != nil {
		t.Fatalf("Parse %v: %v", kv, err)
	}
	if s.Recur == nil {
		t.Fatalf("Parse %v: not a series", kv)
	}
	return s.Recur
}

func utc(s string) time.Time {
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		panic(err)
	}
	return t.UTC()
}

func TestFire(t *testing.T) {
	T := utc("2026-06-01T10:00:00Z")
	for _, c := range []struct {
		name     string
		kv       []string
		due, now time.Time
		at       time.Time
		occ      int64
		next     time.Time // zero: the series ends
	}{
		{"every on time", []string{HeaderEvery, "2s"}, T, T, T, 1, T.Add(2 * time.Second)},
		{"every a little late", []string{HeaderEvery, "2s"}, T, T.Add(1900 * time.Millisecond), T, 1, T.Add(2 * time.Second)},
		{"every catch-up fires the latest missed once", []string{HeaderEvery, "2s", HeaderOccurrence, "4"}, T, T.Add(7500 * time.Millisecond), T.Add(6 * time.Second), 4, T.Add(8 * time.Second)},
		{"every exactly on a later grid point", []string{HeaderEvery, "1m"}, T, T.Add(3 * time.Minute), T.Add(3 * time.Minute), 1, T.Add(4 * time.Minute)},
		{"count: last firing", []string{HeaderEvery, "2s", HeaderCount, "3", HeaderOccurrence, "3"}, T, T, T, 3, time.Time{}},
		{"count: not yet", []string{HeaderEvery, "2s", HeaderCount, "3", HeaderOccurrence, "2"}, T, T, T, 2, T.Add(2 * time.Second)},
		{"until: next within", []string{HeaderEvery, "2s", HeaderUntil, "2026-06-01T10:00:02Z"}, T, T, T, 1, T.Add(2 * time.Second)},
		{"until: next beyond", []string{HeaderEvery, "2s", HeaderUntil, "2026-06-01T10:00:03Z"}, T.Add(2 * time.Second), T.Add(2 * time.Second), T.Add(2 * time.Second), 1, time.Time{}},
		{"until: catch-up stops at until", []string{HeaderEvery, "2s", HeaderUntil, "2026-06-01T10:00:05Z"}, T, T.Add(time.Hour), T.Add(4 * time.Second), 1, time.Time{}},
		{"cron six fields on its seconds", []string{HeaderCron, "*/5 * * * * *"}, T, T.Add(20 * time.Millisecond), T, 1, T.Add(5 * time.Second)},
		{"cron catch-up", []string{HeaderCron, "*/5 * * * * *"}, T, T.Add(12300 * time.Millisecond), T.Add(10 * time.Second), 1, T.Add(15 * time.Second)},
		{"cron five fields, long downtime", []string{HeaderCron, "0 9 * * 1"}, utc("2026-06-01T09:00:00Z"), utc("2026-09-02T00:00:00Z"), utc("2026-08-31T09:00:00Z"), 1, utc("2026-09-07T09:00:00Z")},
		{"cron first occurrence off the grid", []string{HeaderCron, "0 * * * *"}, T.Add(10 * time.Minute), T.Add(10 * time.Minute), T.Add(10 * time.Minute), 1, T.Add(time.Hour)},
		{"cron: off-grid first, late past a grid point", []string{HeaderCron, "0 * * * *"}, T.Add(10 * time.Minute), T.Add(70 * time.Minute), T.Add(time.Hour), 1, T.Add(2 * time.Hour)},
		// America/New_York leaves EST (UTC-5) for EDT (UTC-4) on 2026-03-08:
		// 09:00 local is 14:00 UTC before and 13:00 UTC after.
		{"cron New York across spring forward", []string{HeaderCron, "0 9 * * *", HeaderTimezone, "America/New_York"}, utc("2026-03-07T14:00:00Z"), utc("2026-03-07T14:00:00Z"), utc("2026-03-07T14:00:00Z"), 1, utc("2026-03-08T13:00:00Z")},
		{"cron New York across fall back", []string{HeaderCron, "0 9 * * *", HeaderTimezone, "America/New_York"}, utc("2026-10-31T13:00:00Z"), utc("2026-10-31T13:00:00Z"), utc("2026-10-31T13:00:00Z"), 1, utc("2026-11-01T14:00:00Z")},
		// Europe/Berlin: 02:30 does not exist on 2026-03-29 (02:00 CET ->
		// 03:00 CEST) and is skipped; it exists twice on 2026-10-25 (03:00
		// CEST -> 02:00 CET) and fires at both, as robfig/cron does.
		{"cron Berlin skips the missing 02:30", []string{HeaderCron, "30 2 * * *", HeaderTimezone, "Europe/Berlin"}, utc("2026-03-28T01:30:00Z"), utc("2026-03-28T01:30:00Z"), utc("2026-03-28T01:30:00Z"), 1, utc("2026-03-30T00:30:00Z")},
		{"cron Berlin first 02:30 of fall back", []string{HeaderCron, "30 2 * * *", HeaderTimezone, "Europe/Berlin"}, utc("2026-10-24T00:30:00Z"), utc("2026-10-24T00:30:00Z"), utc("2026-10-24T00:30:00Z"), 1, utc("2026-10-25T00:30:00Z")},
		{"cron Berlin second 02:30 of fall back", []string{HeaderCron, "30 2 * * *", HeaderTimezone, "Europe/Berlin"}, utc("2026-10-25T00:30:00Z"), utc("2026-10-25T00:30:00Z"), utc("2026-10-25T00:30:00Z"), 1, utc("2026-10-25T01:30:00Z")},
		{"cron Berlin catch-up across the change", []string{HeaderCron, "30 2 * * *", HeaderTimezone, "Europe/Berlin"}, utc("2026-10-20T00:30:00Z"), utc("2026-10-25T01:00:00Z"), utc("2026-10-25T00:30:00Z"), 1, utc("2026-10-25T01:30:00Z")},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := mustSeries(t, c.kv...)
			f := r.Fire(c.due, c.now)
			if !f.At.Equal(c.at) || f.Occurrence != c.occ || !f.Next.Equal(c.next) {
				t.Fatalf("Fire(%s, %s) = at %s #%d next %s; want at %s #%d next %s",
					c.due, c.now, f.At, f.Occurrence, f.Next, c.at, c.occ, c.next)
			}
			if f.At.After(c.now) || f.At.Before(c.due) {
				t.Fatalf("fired %s outside [due %s, now %s]", f.At, c.due, c.now)
			}
			if !f.Next.IsZero() && !f.Next.After(c.now) {
				t.Fatalf("next %s not after now %s: a catch-up storm", f.Next, c.now)
			}
		})
	}
}

// TestFireGridNeverDrifts fires an every series late at each step; its
// occurrences stay on start + n × every.
func TestFireGridNeverDrifts(t *testing.T) {
	r := mustSeries(t, HeaderEvery, "1500ms")
	start := utc("2026-06-01T10:00:00Z")
	due := start
	for n := 0; n < 100; n++ {
		f := r.Fire(due, due.Add(time.Duration(n%7)*100*time.Millisecond))
		if want := start.Add(time.Duration(n) * 1500 * time.Millisecond); !f.At.Equal(want) {
			t.Fatalf("firing %d at %s, want %s", n, f.At, want)
		}
		due = f.Next
	}
}

func TestParseSeries(t *testing.T) {
	ts := utc("2026-06-01T10:00:00.250Z")
	base := []string{HeaderTarget, "out", HeaderID, "s1"}
	for _, c := range []struct {
		name string
		kv   []string
		due  time.Time
		err  error
	}{
		{"every, first after the timestamp", []string{HeaderEvery, "2s"}, ts.Add(2 * time.Second), nil},
		{"every with deliver-at", []string{HeaderEvery, "2s", HeaderDeliverAt, "2026-06-01T11:00:00Z"}, utc("2026-06-01T11:00:00Z"), nil},
		{"every with delay", []string{HeaderEvery, "1h", HeaderDelay, "90s"}, ts.Add(90 * time.Second), nil},
		{"cron, first after the timestamp", []string{HeaderCron, "*/10 * * * * *"}, utc("2026-06-01T10:00:10Z"), nil},
		{"cron in a zone", []string{HeaderCron, "0 9 * * *", HeaderTimezone, "Asia/Tokyo"}, utc("2026-06-02T00:00:00Z"), nil},
		{"cron descriptor", []string{HeaderCron, "@hourly"}, utc("2026-06-01T11:00:00Z"), nil},
		{"every under a second", []string{HeaderEvery, "500ms"}, time.Time{}, ErrBadEvery},
		{"every not a duration", []string{HeaderEvery, "often"}, time.Time{}, ErrBadEvery},
		{"every in plain ms", []string{HeaderEvery, "2000"}, time.Time{}, ErrBadEvery},
		{"bad cron", []string{HeaderCron, "61 * * * *"}, time.Time{}, ErrBadCron},
		{"cron with seven fields", []string{HeaderCron, "0 0 0 * * * *"}, time.Time{}, ErrBadCron},
		{"cron @every", []string{HeaderCron, "@every 5s"}, time.Time{}, ErrBadCron},
		{"cron TZ prefix", []string{HeaderCron, "CRON_TZ=Asia/Tokyo 0 9 * * *"}, time.Time{}, ErrBadCron},
		{"cron that never fires", []string{HeaderCron, "0 0 30 2 *"}, time.Time{}, ErrBadCron},
		{"unknown zone", []string{HeaderCron, "0 9 * * *", HeaderTimezone, "Mars/Olympus"}, time.Time{}, ErrBadTimezone},
		{"Local is no zone", []string{HeaderCron, "0 9 * * *", HeaderTimezone, "Local"}, time.Time{}, ErrBadTimezone},
		{"both", []string{HeaderEvery, "2s", HeaderCron, "* * * * *"}, time.Time{}, ErrEveryAndCron},
		{"bad until", []string{HeaderEvery, "2s", HeaderUntil, "tomorrow"}, time.Time{}, ErrBadUntil},
		{"until before the first occurrence", []string{HeaderEvery, "2s", HeaderUntil, "2026-06-01T10:00:01Z"}, time.Time{}, ErrBadUntil},
		{"bad count", []string{HeaderEvery, "2s", HeaderCount, "0"}, time.Time{}, ErrBadCount},
		{"occurrence beyond count", []string{HeaderEvery, "2s", HeaderCount, "2", HeaderOccurrence, "3"}, time.Time{}, ErrBadOccurrence},
	} {
		t.Run(c.name, func(t *testing.T) {
			s, err := Default().Parse(hdrs(append(append([]string(nil), base...), c.kv...)...), ts)
			if c.err != nil {
				var ce *ContractError
				if !errors.Is(err, c.err) || !errors.As(err, &ce) {
					t.Fatalf("err = %v, want %v in a *ContractError", err, c.err)
				}
				if Reason(err) == "other" {
					t.Fatalf("Reason(%v) = other", err)
				}
				return
			}
			if err != nil || s.Recur == nil || !s.Due.Equal(c.due) {
				t.Fatalf("Parse = due %s recur %v err %v; want due %s", s.Due, s.Recur, err, c.due)
			}
		})
	}
	t.Run("no id", func(t *testing.T) {
		_, err := Default().Parse(hdrs(HeaderTarget, "out", HeaderEvery, "2s", HeaderDeliverAt, "0"), ts)
		if !errors.Is(err, ErrRecurWithoutID) || Reason(err) != "recurring_without_id" {
			t.Fatalf("err = %v (%s), want ErrRecurWithoutID", err, Reason(err))
		}
	})
	t.Run("series headers alone are not a series", func(t *testing.T) {
		s, err := Default().Parse(hdrs(HeaderTarget, "out", HeaderTimezone, "Nowhere", HeaderCount, "x", HeaderDelay, "1s"), ts)
		if err != nil || s.Recur != nil {
			t.Fatalf("Parse = %+v, %v; want a one-off record", s, err)
		}
	})
}

func TestNextHeaders(t *testing.T) {
	in := hdrs(HeaderTarget, "out", HeaderID, "s1", "app", "x", HeaderEvery, "2s", HeaderDelay, "5s", HeaderOccurrence, "2")
	ts := utc("2026-06-01T10:00:00Z")
	next := ts.Add(9 * time.Second)
	out := NextHeaders(in, next, ts, 3)
	s, err := Default().Parse(out, ts.Add(7*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if !s.Due.Equal(next) || s.Recur == nil || s.Recur.Occurrence != 3 || s.Recur.Every != 2*time.Second {
		t.Fatalf("next record parses as due %s %+v", s.Due, s.Recur)
	}
	if got := OriginalTimestamp(out, time.Time{}); !got.Equal(ts) {
		t.Fatalf("original timestamp %s, want %s", got, ts)
	}
	n := 0
	for _, h := range out {
		if h.Key == HeaderOccurrence {
			n++
		}
		if h.Key == HeaderDelay {
			t.Fatalf("kdelay-delay kept: %v", out)
		}
	}
	if n != 1 || len(in) != 6 {
		t.Fatalf("occurrence headers %d, input changed to %d headers", n, len(in))
	}
	// A second hop keeps the series' first timestamp.
	out2 := NextHeaders(out, next.Add(2*time.Second), ts.Add(9*time.Second), 4)
	if got := OriginalTimestamp(out2, time.Time{}); !got.Equal(ts) {
		t.Fatalf("second hop original timestamp %s, want %s", got, ts)
	}
}

func TestStampSeries(t *testing.T) {
	tab := Default()
	ts := utc("2026-06-01T10:00:00Z")
	for _, c := range []struct {
		name    string
		d       Delay
		due     time.Time
		wantErr bool
	}{
		{"every", Delay{Target: "out", ID: "s", Every: 90 * time.Second}, ts.Add(90 * time.Second), false},
		{"every with at", Delay{Target: "out", ID: "s", Every: time.Hour, At: ts.Add(10 * time.Second)}, ts.Add(10 * time.Second), false},
		{"cron in a zone with count and until", Delay{Target: "out", ID: "s", Cron: "0 30 9 * * *", Timezone: "Europe/Berlin", Count: 3, Until: ts.Add(72 * time.Hour)}, utc("2026-06-02T07:30:00Z"), false},
		{"no id", Delay{Target: "out", Every: time.Minute}, time.Time{}, true},
		{"bad cron", Delay{Target: "out", ID: "s", Cron: "every day"}, time.Time{}, true},
		{"short every", Delay{Target: "out", ID: "s", Every: time.Millisecond}, time.Time{}, true},
		{"until first", Delay{Target: "out", ID: "s", Every: time.Hour, Until: ts.Add(time.Minute)}, time.Time{}, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := &kgo.Record{Key: []byte("k"), Timestamp: ts}
			err := tab.Stamp(r, "delays", c.d, ts)
			if c.wantErr {
				if err == nil {
					t.Fatalf("stamped %v", r.Headers)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			s, err := tab.Parse(r.Headers, ts)
			if err != nil || s.Recur == nil || !s.Due.Equal(c.due) {
				t.Fatalf("stamped record parses as due %s, %+v, %v; want due %s", s.Due, s.Recur, err, c.due)
			}
			if want := tab.PartitionFor(tab.LevelFor(s.Delay), r.Key); r.Partition != want {
				t.Fatalf("partition %d, want %d (level of the first occurrence)", r.Partition, want)
			}
		})
	}
}
