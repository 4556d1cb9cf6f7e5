package integration

import (
	"bytes"
	"cmp"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kdelay/kdelay/levels"
)

// figures are the outcome of a scenario (or a part of one).
type figures struct {
	sent, delivered, duplicated, early, lost, dead int
	reread                                         int // records the observer read twice at the same offset

	late    []time.Duration // forwarded record timestamp - kdelay-due-at, first copy of each
	arrive  []time.Duration // observed arrival - kdelay-due-at, first copy of each
	dupKeys []string        // keys that arrived more than once
}

// check verifies the records sent under keys and reports the figures
// (t.Logf, and a row of the KDELAY_TEST_REPORT file):
//
//   - every record arrives at its destination (its target, or the
//     dead-letter topic with the expected reason): lost must be 0;
//   - no copy of a forwarded record is early: its timestamp (set by the
//     relay's producer) and the time the observer saw it are both at or
//     after its due time; early must be 0;
//   - kdelay-due-at is the due time the producer's headers give; the
//     forwarded copy keeps key, value and own headers, has no kdelay
//     control header, goes to the requested target partition, and names
//     its source; a dead letter keeps everything and names its source;
//   - duplicates (copies beyond the first) are at most maxDup (-1: no
//     bound, only reported).
func (s *scenario) check(t *testing.T, label string, keys []string, maxDup int) figures {
	t.Helper()
	var f figures
	f.sent = len(keys)
	slices.Sort(keys)
	for _, k := range keys {
		s.mu.Lock()
		sr := s.sent[k]
		s.mu.Unlock()
		if sr == nil {
			t.Errorf("%s: key %s was never sent", label, k)
			continue
		}
		var at []arrival
		for _, a := range s.obs.arrivals(k) {
			if slices.ContainsFunc(at, func(b arrival) bool { return sameRecord(a, b) }) {
				f.reread++ // the observer's consumer read one record twice: not a second copy
				continue
			}
			if a.topic == sr.dest {
				at = append(at, a)
			} else {
				t.Errorf("%s: record %s arrived at %s (error %q), want %s", label, k, a.topic, a.errText, sr.dest)
			}
		}
		if len(at) == 0 {
			f.lost++
			t.Errorf("%s: record %s (due %s, to %s) lost", label, k, fmtTime(sr.due), sr.dest)
			continue
		}
		f.delivered++
		if len(at) > 1 {
			f.duplicated += len(at) - 1
			f.dupKeys = append(f.dupKeys, k)
			if maxDup >= 0 {
				t.Logf("%s: record %s arrived %d times: %s", label, k, len(at), describeCopies(at))
			}
		}
		if sr.dest == s.dlq {
			f.dead++
			s.checkDeadLetter(t, label, sr, at)
			continue
		}
		s.checkForwarded(t, label, sr, at, &f)
		f.late = append(f.late, at[0].ts.Sub(at[0].due))
		f.arrive = append(f.arrive, at[0].at.Sub(at[0].due))
	}
	if f.reread > 0 {
		t.Logf("%s: the observer read %d records twice (same partition and offset; not counted as duplicates)", label, f.reread)
	}
	if maxDup >= 0 && f.duplicated > maxDup {
		t.Errorf("%s: %d duplicates, at most %d allowed", label, f.duplicated, maxDup)
	}
	if f.early != 0 || f.lost != 0 {
		t.Errorf("%s: early=%d lost=%d, both must be 0", label, f.early, f.lost)
	}
	s.report(t, label, f)
	return f
}

func (s *scenario) checkForwarded(t *testing.T, label string, sr *sentRecord, at []arrival, f *figures) {
	t.Helper()
	for i, a := range at {
		if a.ts.Before(sr.due) || a.at.Before(sr.due) {
			f.early++
			t.Errorf("%s: record %s copy %d EARLY: due %s, forwarded (timestamp) %s, seen %s",
				label, sr.key, i+1, fmtTime(sr.due), fmtTime(a.ts), fmtTime(a.at))
		}
		if !a.due.Equal(sr.due) {
			t.Errorf("%s: record %s: kdelay-due-at %s, want %s", label, sr.key, fmtTime(a.due), fmtTime(sr.due))
		}
		if sr.targetPart >= 0 && a.partition != sr.targetPart {
			t.Errorf("%s: record %s arrived in partition %d, want %d (kdelay-target-partition)", label, sr.key, a.partition, sr.targetPart)
		}
		if !bytes.Equal(a.value, sr.value) {
			t.Errorf("%s: record %s: value %q, want %q", label, sr.key, a.value, sr.value)
		}
		if !containsHeaders(a.headers, sr.own) {
			t.Errorf("%s: record %s: own headers %v not kept in %v", label, sr.key, sr.own, a.headers)
		}
		for _, h := range a.headers {
			if levels.IsControl(h.Key) && h.Key != levels.HeaderDueAt && h.Key != levels.HeaderSource && h.Key != levels.HeaderID {
				t.Errorf("%s: record %s: control header %s left on the forwarded copy", label, sr.key, h.Key)
			}
		}
		if id := levels.ID(a.headers); id != sr.id {
			t.Errorf("%s: record %s: kdelay-id %q on the forwarded copy, want %q", label, sr.key, id, sr.id)
		}
		if !strings.HasPrefix(a.source, s.topic+"/") {
			t.Errorf("%s: record %s: kdelay-source %q, want %s/<partition>/<offset>", label, sr.key, a.source, s.topic)
		}
	}
}

func (s *scenario) checkDeadLetter(t *testing.T, label string, sr *sentRecord, at []arrival) {
	t.Helper()
	want := levels.Source(s.topic, sr.partition, sr.offset)
	for _, a := range at {
		if a.errText == "" || !strings.Contains(a.errText, sr.reason) {
			t.Errorf("%s: dead letter %s: kdelay-error %q, want it to contain %q", label, sr.key, a.errText, sr.reason)
		}
		if a.source != want {
			t.Errorf("%s: dead letter %s: kdelay-source %q, want %q", label, sr.key, a.source, want)
		}
		if !bytes.Equal(a.value, sr.value) {
			t.Errorf("%s: dead letter %s: value %q, want %q", label, sr.key, a.value, sr.value)
		}
		if !containsHeaders(a.headers, sr.own) {
			t.Errorf("%s: dead letter %s: own headers %v not kept in %v", label, sr.key, sr.own, a.headers)
		}
	}
}

// pct returns the q-quantile (nearest rank) of ds, sorted in place.
func pct(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	slices.Sort(ds)
	i := int(q*float64(len(ds))+0.999999) - 1
	return ds[max(0, min(len(ds)-1, i))]
}

func fmtDur(d time.Duration) string {
	switch {
	case d < 0:
		return "-" + fmtDur(-d)
	case d < time.Second:
		return fmt.Sprintf("%dms", d.Milliseconds())
	default:
		return fmt.Sprintf("%.2fs", d.Seconds())
	}
}

func fmtTime(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.Format("15:04:05.000")
}

func triple(ds []time.Duration) string {
	if len(ds) == 0 {
		return "-"
	}
	return fmt.Sprintf("%s / %s / %s", fmtDur(pct(ds, 0.5)), fmtDur(pct(ds, 0.99)), fmtDur(pct(ds, 1)))
}

var (
	reportMu sync.Mutex
	// reported are the rows of every scenario that ran, for the summary
	// printed at the end of the suite.
	reported []reportRow
)

// reportRow is one scenario's line of the summary.
type reportRow struct {
	tier, label, mode string
	f                 figures
	wall              time.Duration
}

const reportHeader = "| tier | scenario | mode | sent | delivered | duplicated | early | lost | dead-lettered | lateness ts−due p50 / p99 / max | arrival−due p50 / p99 / max | wall |\n" +
	"|---|---|---|---:|---:|---:|---:|---:|---:|---|---|---:|\n"

func (r reportRow) String() string {
	return fmt.Sprintf("| %s | %s | %s | %d | %d | %d | %d | %d | %d | %s | %s | %s |\n",
		r.tier, r.label, r.mode, r.f.sent, r.f.delivered, r.f.duplicated, r.f.early, r.f.lost, r.f.dead,
		triple(slices.Clone(r.f.late)), triple(slices.Clone(r.f.arrive)), r.wall)
}

// report logs the figures on one line, keeps them for the summary, and
// appends them as a row to the markdown file named by KDELAY_TEST_REPORT,
// if set.
func (s *scenario) report(t *testing.T, label string, f figures) {
	t.Helper()
	row := reportRow{tier: s.tier, label: label, mode: s.mode(), f: f, wall: time.Since(s.begun).Round(100 * time.Millisecond)}
	t.Logf("REPORT %s [%s, %s]: sent=%d delivered=%d duplicated=%d early=%d lost=%d dead-lettered=%d lateness(ts-due) p50/p99/max=%s arrival-due p50/p99/max=%s wall=%s",
		label, s.tier, row.mode, f.sent, f.delivered, f.duplicated, f.early, f.lost, f.dead, triple(f.late), triple(f.arrive), row.wall)
	reportMu.Lock()
	defer reportMu.Unlock()
	reported = append(reported, row)
	path := os.Getenv(envReport)
	if path == "" {
		return
	}
	var b strings.Builder
	if st, err := os.Stat(path); err != nil || st.Size() == 0 {
		b.WriteString(reportHeader)
	}
	b.WriteString(row.String())
	fh, err := os.OpenFile(path, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		t.Errorf("%s: %v", envReport, err)
		return
	}
	defer fh.Close()
	if _, err := fh.WriteString(b.String()); err != nil {
		t.Errorf("%s: %v", envReport, err)
	}
}

// printSummary prints the rows of every scenario that ran, by scenario
// and mode, as one markdown table (TestMain calls it after the tests).
func printSummary(w io.Writer) {
	reportMu.Lock()
	defer reportMu.Unlock()
	if len(reported) == 0 {
		return
	}
	rows := slices.Clone(reported)
	slices.SortStableFunc(rows, func(a, b reportRow) int {
		return cmp.Or(cmp.Compare(a.label, b.label), cmp.Compare(a.mode, b.mode))
	})
	var b strings.Builder
	fmt.Fprintf(&b, "\nintegration: summary of %d scenarios (per scenario and delivery mode)\n\n", len(rows))
	b.WriteString(reportHeader)
	for _, r := range rows {
		b.WriteString(r.String())
	}
	_, _ = io.WriteString(w, b.String())
}

// sameRecord reports whether a and b are one record (topic, partition,
// offset) that the observer read twice, as a consumer may after a leader
// change; two copies of a record are two offsets.
func sameRecord(a, b arrival) bool {
	return a.topic == b.topic && a.partition == b.partition && a.offset == b.offset
}

// describeCopies lists where and when each copy of a record was written,
// so that a duplicate can be told apart: two forwards of one source
// record, or two source records.
func describeCopies(at []arrival) string {
	parts := make([]string, 0, len(at))
	for _, a := range at {
		parts = append(parts, fmt.Sprintf("%s/%d@%d ts %s seen %s from %s", a.topic, a.partition, a.offset, fmtTime(a.ts), fmtTime(a.at), a.source))
	}
	return strings.Join(parts, "; ")
}
