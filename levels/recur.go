package levels

import (
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/robfig/cron/v3"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Headers of a recurring series. A delay-topic record with [HeaderEvery] or
// [HeaderCron] is a series: each time it comes due the relay forwards one
// copy and writes the next occurrence back to the delay topic. A series
// needs a [HeaderID] (its cancels are keyed by it).
const (
	// HeaderEvery makes the record a series on a fixed grid: a Go duration
	// of at least [MinEvery]. Occurrence n (0-based) is due at first +
	// n × every, where first is the first occurrence.
	HeaderEvery = "kdelay-every"
	// HeaderCron makes the record a series on a cron expression: five
	// fields (minute hour day-of-month month day-of-week) or six with
	// seconds first, or a descriptor such as @daily, in robfig/cron's
	// syntax, read in [HeaderTimezone].
	HeaderCron = "kdelay-cron"
	// HeaderTimezone is the IANA time zone a cron expression is read in,
	// default UTC. Daylight-saving changes are handled as robfig/cron
	// does: a wall-clock time that does not exist that day (spring
	// forward) is skipped, one that exists twice (fall back) fires at
	// both instants.
	HeaderTimezone = "kdelay-timezone"
	// HeaderUntil (epoch ms or RFC 3339) ends a series: no occurrence is
	// due after it.
	HeaderUntil = "kdelay-until"
	// HeaderCount ends a series after that many firings (a positive
	// integer).
	HeaderCount = "kdelay-count"
	// HeaderOccurrence numbers the firings of a series from 1: on the
	// forwarded copy, which firing it is; on a delay-topic record the
	// relay wrote back, which firing it will be (absent: 1).
	HeaderOccurrence = "kdelay-occurrence"
)

// MinEvery is the shortest [HeaderEvery] accepted.
const MinEvery = time.Second

// Sentinel errors of a series' headers; [Table.Parse] wraps them in a
// *[ContractError].
var (
	ErrBadEvery       = errors.New("invalid every (a Go duration of at least 1s)")
	ErrBadCron        = errors.New("invalid cron expression")
	ErrBadTimezone    = errors.New("unknown time zone (an IANA name such as Europe/Berlin)")
	ErrBadUntil       = errors.New("invalid until (epoch ms or RFC 3339, not before the first occurrence)")
	ErrBadCount       = errors.New("invalid count (a positive integer)")
	ErrBadOccurrence  = errors.New("invalid occurrence (a positive integer, at most kdelay-count)")
	ErrEveryAndCron   = errors.New("both kdelay-every and kdelay-cron given")
	ErrRecurWithoutID = errors.New("a recurring record needs a kdelay-id")
)

// cronParser reads five fields, or six with seconds first, and the @
// descriptors.
var cronParser = cron.NewParser(cron.SecondOptional | cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// Recurrence is what the headers of a series say. The zero value is no
// series.
type Recurrence struct {
	// Every is the grid step of a kdelay-every series, 0 for cron.
	Every time.Duration
	// Cron is the expression of a kdelay-cron series, "" for every.
	Cron string
	// Location is the time zone of a cron series (UTC by default).
	Location *time.Location
	// Until is the last time an occurrence may be due; zero: no end.
	Until time.Time
	// Count is the number of firings of the series; 0: no limit.
	Count int64
	// Occurrence is the number of the firing this record is, from 1.
	Occurrence int64

	sched cron.Schedule
}

// String describes the series and the firing the record is: "every 2s,
// occurrence 3 of 5" or "cron \"0 30 9 * * *\" in Europe/Berlin,
// occurrence 1, until 2026-12-31T00:00:00Z".
func (r *Recurrence) String() string {
	var b strings.Builder
	if r.Every > 0 {
		b.WriteString("every " + r.Every.String())
	} else {
		b.WriteString("cron " + strconv.Quote(r.Cron) + " in " + r.Location.String())
	}
	b.WriteString(", occurrence " + strconv.FormatInt(r.Occurrence, 10))
	if r.Count > 0 {
		b.WriteString(" of " + strconv.FormatInt(r.Count, 10))
	}
	if !r.Until.IsZero() {
		b.WriteString(", until " + r.Until.UTC().Format(time.RFC3339Nano))
	}
	return b.String()
}

// Firing is one firing of a series, computed by [Recurrence.Fire].
type Firing struct {
	// At is the occurrence fired: its due time (kdelay-due-at).
	At time.Time
	// Occurrence is its number (kdelay-occurrence), from 1.
	Occurrence int64
	// Next is the occurrence after it, zero when the series ends here.
	Next time.Time
}

// Fire returns the firing of a series record due at due, fired at now
// (due <= now). After downtime the series fires once, for the latest
// occurrence at or before now (and not after Until), never for each one
// it missed; Next lies after now on the series' grid. Next is zero when
// Count or Until ends the series with this firing.
func (r *Recurrence) Fire(due, now time.Time) Firing {
	limit := now
	if !r.Until.IsZero() && r.Until.Before(limit) {
		limit = r.Until
	}
	f := Firing{At: due, Occurrence: r.Occurrence}
	if limit.After(due) {
		f.At = r.latest(due, limit)
	}
	if r.Count > 0 && f.Occurrence >= r.Count {
		return f
	}
	next := r.after(f.At)
	if next.IsZero() || (!r.Until.IsZero() && next.After(r.Until)) {
		return f
	}
	f.Next = next
	return f
}

// First returns the first occurrence of a series written at ts without a
// due time of its own: the first occurrence after ts.
func (r *Recurrence) First(ts time.Time) time.Time { return r.after(ts) }

// after returns the first occurrence strictly after t on the series' grid
// (an every series' grid goes through t), zero if there is none (a cron
// expression with no time in the next five years, as robfig/cron stops).
func (r *Recurrence) after(t time.Time) time.Time {
	if r.Every > 0 {
		return t.Add(r.Every)
	}
	n := r.sched.Next(t.In(r.Location))
	if n.IsZero() {
		return n
	}
	return n.In(time.UTC)
}

// latest returns the latest occurrence in [due, limit] of a series whose
// occurrence is due at due.
func (r *Recurrence) latest(due, limit time.Time) time.Time {
	if r.Every > 0 {
		return due.Add(limit.Sub(due) / r.Every * r.Every)
	}
	if n := r.after(due); n.IsZero() || n.After(limit) {
		return due
	}
	// Some occurrence lies in (due, limit]. Widen a window ending at
	// limit until it holds one, then walk it: only the occurrences of
	// the window's older half are visited, never the whole downtime's.
	for w := time.Second; ; w *= 2 {
		from := limit.Add(-w)
		if !from.After(due) || w > 1<<62 {
			from = due
		}
		n := r.after(from)
		if n.IsZero() || n.After(limit) {
			continue
		}
		for {
			m := r.after(n)
			if m.IsZero() || m.After(limit) {
				return n
			}
			n = m
		}
	}
}

// IsSeries reports whether a record's headers make it a series (without
// checking them: [Table.Parse] does).
func IsSeries(hs []kgo.RecordHeader) bool {
	for _, h := range hs {
		if h.Key == HeaderEvery || h.Key == HeaderCron {
			return true
		}
	}
	return false
}

// parseRecurrence reads the series headers of a record; nil, nil when
// the record is not a series. id is the record's kdelay-id ("" if none).
func (t *Table) parseRecurrence(hs []kgo.RecordHeader, id string) (*Recurrence, error) {
	every, isEvery := lastHeader(hs, HeaderEvery)
	spec, isCron := lastHeader(hs, HeaderCron)
	if !isEvery && !isCron {
		return nil, nil
	}
	r := &Recurrence{Location: time.UTC, Occurrence: 1}
	switch {
	case isEvery && isCron:
		return nil, headerErr(HeaderCron, spec, ErrEveryAndCron)
	case isEvery:
		d, err := time.ParseDuration(strings.TrimSpace(every))
		if err != nil || d < MinEvery || d > maxDelay {
			return nil, headerErr(HeaderEvery, every, ErrBadEvery)
		}
		r.Every = d
	default:
		s := strings.TrimSpace(spec)
		if strings.HasPrefix(s, "TZ=") || strings.HasPrefix(s, "CRON_TZ=") || strings.HasPrefix(s, "@every") {
			// One way to say each: kdelay-timezone, kdelay-every.
			return nil, headerErr(HeaderCron, spec, ErrBadCron)
		}
		sched, err := cronParser.Parse(s)
		if err != nil {
			return nil, headerErr(HeaderCron, spec, ErrBadCron)
		}
		r.Cron, r.sched = s, sched
	}
	if v, ok := lastHeader(hs, HeaderTimezone); ok {
		loc, err := t.zone(strings.TrimSpace(v))
		if err != nil {
			return nil, headerErr(HeaderTimezone, v, ErrBadTimezone)
		}
		r.Location = loc
	}
	if v, ok := lastHeader(hs, HeaderUntil); ok {
		u, err := parseDeliverAt(v)
		if err != nil {
			return nil, headerErr(HeaderUntil, v, ErrBadUntil)
		}
		r.Until = u
	}
	if v, ok := lastHeader(hs, HeaderCount); ok {
		n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		if err != nil || n < 1 {
			return nil, headerErr(HeaderCount, v, ErrBadCount)
		}
		r.Count = n
	}
	if v, ok := lastHeader(hs, HeaderOccurrence); ok {
		n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		if err != nil || n < 1 || (r.Count > 0 && n > r.Count) {
			return nil, headerErr(HeaderOccurrence, v, ErrBadOccurrence)
		}
		r.Occurrence = n
	}
	if id == "" {
		return nil, &ContractError{Err: ErrRecurWithoutID}
	}
	return r, nil
}

// zone loads an IANA time zone once per table; "" and "UTC" are UTC.
func (t *Table) zone(name string) (*time.Location, error) {
	if name == "" || name == "UTC" {
		return time.UTC, nil
	}
	if l, ok := t.zones.Load(name); ok {
		return l.(*time.Location), nil
	}
	if name == "Local" {
		return nil, errors.New("levels: the relay's local zone is not a series zone")
	}
	loc, err := time.LoadLocation(name)
	if err != nil {
		return nil, err
	}
	t.zones.Store(name, loc) // only names that load: bounded by the zone database
	return loc, nil
}

// NextHeaders returns the headers of the record that schedules a series'
// next occurrence on the delay topic: the series record's headers with an
// absolute [HeaderDeliverAt] of next, the next [HeaderOccurrence], and
// the producer's timestamp in [HeaderOriginalTimestamp] (ts when the
// record has none yet), so that cancels apply to the whole series as to a
// cascade. hs is not modified.
func NextHeaders(hs []kgo.RecordHeader, next, ts time.Time, occurrence int64) []kgo.RecordHeader {
	out := make([]kgo.RecordHeader, 0, len(hs)+3)
	for _, h := range CascadeHeadersAt(hs, next, ts) {
		if h.Key != HeaderOccurrence {
			out = append(out, h)
		}
	}
	return append(out, kgo.RecordHeader{Key: HeaderOccurrence, Value: strconv.AppendInt(nil, occurrence, 10)})
}

// AppendOccurrence adds [HeaderOccurrence] n to the headers of a
// forwarded copy.
func AppendOccurrence(hs []kgo.RecordHeader, n int64) []kgo.RecordHeader {
	return append(hs, kgo.RecordHeader{Key: HeaderOccurrence, Value: strconv.AppendInt(nil, n, 10)})
}
