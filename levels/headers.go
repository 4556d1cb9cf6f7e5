package levels

import (
	"errors"
	"fmt"
	"maps"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Header names of the producer contract. Every kdelay header starts with
// [HeaderPrefix]; the first five are control headers set by producers and
// removed on delivery.
const (
	// HeaderPrefix starts every header kdelay reads or writes.
	HeaderPrefix = "kdelay-"
	// HeaderTarget (required) is the topic to deliver to.
	HeaderTarget = "kdelay-target"
	// HeaderDelay is the delay after the record timestamp: a Go duration
	// ("90s", "1h30m") or whole milliseconds ("90000").
	HeaderDelay = "kdelay-delay"
	// HeaderDeliverAt is the absolute due time: epoch milliseconds or RFC
	// 3339. It wins over HeaderDelay and HeaderLevel.
	HeaderDeliverAt = "kdelay-deliver-at"
	// HeaderLevel is a RocketMQ-style level number, 1..levels; the delay is
	// that level's duration. HeaderDelay wins over it.
	HeaderLevel = "kdelay-level"
	// HeaderTargetPartition is an optional partition of the target topic;
	// without it the record key decides, as Kafka's default partitioner does.
	HeaderTargetPartition = "kdelay-target-partition"
	// HeaderID is an optional schedule id chosen by the producer, 1 to
	// [MaxIDLen] bytes: a cancel on the cancel topic whose key is this id
	// cancels the record. It is kept on the forwarded record and on dead
	// letters.
	HeaderID = "kdelay-id"
	// HeaderCancelBefore, on a record of the cancel topic, is the cancel's
	// cut-off in epoch milliseconds: records with the id whose original
	// timestamp lies before it are cancelled. Without it the cancel
	// record's own timestamp is the cut-off.
	HeaderCancelBefore = "kdelay-cancel-before"
	// HeaderCancelledAt is added to a cancelled record written to
	// KDELAY_CANCELLED_TOPIC: when the relay cancelled it, epoch ms.
	HeaderCancelledAt = "kdelay-cancelled-at"

	// HeaderDueAt is added to a forwarded record: its due time, epoch ms.
	HeaderDueAt = "kdelay-due-at"
	// HeaderSource is added to forwarded and dead-lettered records:
	// "topic/partition/offset" of the delay-topic record.
	HeaderSource = "kdelay-source"
	// HeaderError is added to a dead-lettered record: the reason.
	HeaderError = "kdelay-error"
	// HeaderOriginalTimestamp is added to a dead-lettered record by the
	// relay: the source record's timestamp in epoch milliseconds (the dead
	// letter's own timestamp is the time it was sent). A cascaded copy
	// carries it too, with the timestamp of the record as its producer
	// wrote it: cancels compare their cut-off with that one.
	HeaderOriginalTimestamp = "kdelay-original-timestamp"
)

// MaxIDLen bounds a [HeaderID] value, in bytes.
const MaxIDLen = 255

// maxDelay bounds any delay the parser accepts so that due-time arithmetic
// cannot overflow; operators set a tighter limit (KDELAY_MAX_DELAY).
const maxDelay = 100 * 365 * 24 * time.Hour

// Sentinel errors of [Parse]; the returned *[ContractError] wraps one.
var (
	ErrMissingTarget   = errors.New("missing target")
	ErrBadTarget       = errors.New("invalid target topic")
	ErrBadPartition    = errors.New("invalid target partition")
	ErrBadDelay        = errors.New("invalid delay")
	ErrNegativeDelay   = errors.New("negative delay")
	ErrLevelOutOfRange = errors.New("level out of range")
	ErrBadDeliverAt    = errors.New("invalid deliver-at")
	ErrNoSchedule      = errors.New("none of kdelay-delay, kdelay-deliver-at, kdelay-level given")
	ErrBadID           = errors.New("invalid id (kdelay-id must be 1 to 255 bytes)")
)

// ContractError is a record whose kdelay headers break the contract. It
// unwraps to one of the Err* sentinels of this package.
type ContractError struct {
	Header string // the offending header, "" when one is missing
	Value  string // its value, cut to 64 bytes
	Err    error  // the sentinel
}

func (e *ContractError) Error() string {
	if e.Header == "" {
		return "levels: " + e.Err.Error()
	}
	return fmt.Sprintf("levels: %s: header %s=%q", e.Err, e.Header, e.Value)
}

func (e *ContractError) Unwrap() error { return e.Err }

// Reason returns a short, stable label for err, for metrics and logs:
// "missing_target", "bad_delay", ... or "other".
func Reason(err error) string {
	for _, r := range []struct {
		err  error
		name string
	}{
		{ErrMissingTarget, "missing_target"},
		{ErrBadTarget, "bad_target"},
		{ErrBadPartition, "bad_target_partition"},
		{ErrBadDelay, "bad_delay"},
		{ErrNegativeDelay, "negative_delay"},
		{ErrLevelOutOfRange, "level_out_of_range"},
		{ErrBadDeliverAt, "bad_deliver_at"},
		{ErrNoSchedule, "no_schedule"},
		{ErrBadID, "bad_id"},
		{ErrBadEvery, "bad_every"},
		{ErrBadCron, "bad_cron"},
		{ErrBadTimezone, "bad_timezone"},
		{ErrBadUntil, "bad_until"},
		{ErrBadCount, "bad_count"},
		{ErrBadOccurrence, "bad_occurrence"},
		{ErrEveryAndCron, "every_and_cron"},
		{ErrRecurWithoutID, "recurring_without_id"},
	} {
		if errors.Is(err, r.err) {
			return r.name
		}
	}
	return "other"
}

// Schedule is what the headers of a delayed record say.
type Schedule struct {
	Target string
	// TargetPartition is the requested target partition, or -1 to let the
	// key decide.
	TargetPartition int32
	// Due is when the record is due.
	Due time.Time
	// Delay is Due minus the record timestamp (may be negative when an
	// absolute due time lies before the timestamp).
	Delay time.Duration
	// ID is the kdelay-id, "" when none.
	ID string
	// Recur is the series the record belongs to, nil when it is not
	// recurring ([HeaderEvery], [HeaderCron]). Due is then the occurrence
	// the record fires.
	Recur *Recurrence
}

func lastHeader(hs []kgo.RecordHeader, key string) (string, bool) {
	v, ok := lastValue(hs, key)
	return string(v), ok
}

// lastValue is lastHeader without the copy into a string: Parse converts
// only the values it keeps (the target and the ID), so that reading a
// schedule allocates nothing else.
func lastValue(hs []kgo.RecordHeader, key string) ([]byte, bool) {
	for i := len(hs) - 1; i >= 0; i-- {
		if hs[i].Key == key {
			return hs[i].Value, true
		}
	}
	return nil, false
}

func headerErr(header, value string, err error) *ContractError {
	if len(value) > 64 {
		value = value[:64]
	}
	return &ContractError{Header: header, Value: value, Err: err}
}

// Parse reads the schedule of a delay-topic record from its headers and
// timestamp. When a header repeats, the last one counts, as in Kafka's
// lastHeader. The error, if any, is a *[ContractError].
func (t *Table) Parse(hs []kgo.RecordHeader, ts time.Time) (Schedule, error) {
	s := Schedule{TargetPartition: -1}
	target, err := t.target(hs)
	if err != nil {
		return s, err
	}
	s.Target = target
	if v, ok := lastHeader(hs, HeaderID); ok {
		if len(v) == 0 || len(v) > MaxIDLen {
			return s, headerErr(HeaderID, v, ErrBadID)
		}
		s.ID = v
	}
	r, err := t.parseRecurrence(hs, s.ID)
	if err != nil {
		return s, err
	}
	s.Recur = r
	if s.TargetPartition, err = targetPartition(hs); err != nil {
		return s, err
	}

	if b, ok := lastValue(hs, HeaderDeliverAt); ok {
		due, err := parseDeliverAt(string(b))
		if err != nil {
			return s, headerErr(HeaderDeliverAt, string(b), ErrBadDeliverAt)
		}
		s.Due = ceilMilli(due)
		s.Delay = s.Due.Sub(ts)
		return s, s.checkUntil()
	}
	var delay time.Duration
	if b, ok := lastValue(hs, HeaderDelay); ok {
		d, err := parseDelay(string(b))
		if err != nil {
			return s, headerErr(HeaderDelay, string(b), err)
		}
		delay = d
	} else if b, ok := lastValue(hs, HeaderLevel); ok {
		n, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil || n < 1 || n > t.Levels() {
			return s, headerErr(HeaderLevel, string(b), ErrLevelOutOfRange)
		}
		delay = t.Duration(n)
	} else if s.Recur != nil {
		first := s.Recur.First(ts)
		if first.IsZero() {
			return s, headerErr(HeaderCron, s.Recur.Cron, ErrBadCron) // no time in five years
		}
		delay = first.Sub(ts)
	} else {
		return s, &ContractError{Err: ErrNoSchedule}
	}
	due := ceilMilli(ts.Add(delay))
	switch {
	case due.UnixMilli() < 0:
		// A timestamp before 1970 (Kafka's -1 is "none"): already due.
		due = time.UnixMilli(0)
	case due.UnixMilli() > maxDeliverAtMs:
		return s, headerErr(HeaderDelay, strconv.FormatInt(delay.Milliseconds(), 10), ErrBadDelay)
	}
	s.Due = due
	s.Delay = s.Due.Sub(ts)
	return s, s.checkUntil()
}

// Target returns the target topic and partition (-1: none, the key
// decides) of a delay-topic record, as [Table.Parse] reads them, with
// the same checks and errors, and nothing else of its schedule: for a
// record whose schedule was read before, when only where it goes is
// needed again.
func (t *Table) Target(hs []kgo.RecordHeader) (string, int32, error) {
	target, err := t.target(hs)
	if err != nil {
		return "", -1, err
	}
	p, err := targetPartition(hs)
	if err != nil {
		return "", -1, err
	}
	return target, p, nil
}

// maxTargets bounds the target names a Table keeps (Table.targets).
const maxTargets = 256

// target reads and checks the [HeaderTarget] of hs. A name read before
// is returned as the string kept then (Table.targets).
func (t *Table) target(hs []kgo.RecordHeader) (string, error) {
	b, ok := lastValue(hs, HeaderTarget)
	if !ok || len(b) == 0 {
		return "", headerErr(HeaderTarget, string(b), ErrMissingTarget)
	}
	known := t.targets.Load()
	if known != nil {
		if name, ok := (*known)[string(b)]; ok {
			return name, nil
		}
	}
	name := string(b)
	if err := ValidTopicName(name); err != nil {
		return "", headerErr(HeaderTarget, name, ErrBadTarget)
	}
	if known == nil || len(*known) < maxTargets {
		m := map[string]string{name: name}
		if known != nil {
			maps.Copy(m, *known)
		}
		t.targets.CompareAndSwap(known, &m) // lost to another reader: kept next time
	}
	return name, nil
}

// targetPartition reads and checks the [HeaderTargetPartition] of hs; -1
// when there is none.
func targetPartition(hs []kgo.RecordHeader) (int32, error) {
	b, ok := lastValue(hs, HeaderTargetPartition)
	if !ok {
		return -1, nil
	}
	p, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 32)
	if err != nil || p < 0 {
		return -1, headerErr(HeaderTargetPartition, string(b), ErrBadPartition)
	}
	return int32(p), nil
}

// checkUntil refuses a series whose first occurrence lies after its end.
func (s *Schedule) checkUntil() error {
	if r := s.Recur; r != nil && !r.Until.IsZero() && s.Due.After(r.Until) {
		return headerErr(HeaderUntil, strconv.FormatInt(r.Until.UnixMilli(), 10), ErrBadUntil)
	}
	return nil
}

// ceilMilli rounds t up to a whole millisecond, the precision of Kafka
// timestamps and of the wheel, so that rounding can never make a record
// early.
func ceilMilli(t time.Time) time.Time {
	if r := t.Truncate(time.Millisecond); !r.Equal(t) {
		return r.Add(time.Millisecond)
	}
	return t
}

// parseDelay accepts a Go duration or whole milliseconds.
func parseDelay(v string) (time.Duration, error) {
	v = strings.TrimSpace(v)
	var d time.Duration
	if ms, err := strconv.ParseInt(v, 10, 64); err == nil {
		if ms > int64(maxDelay/time.Millisecond) || ms < -int64(maxDelay/time.Millisecond) {
			return 0, ErrBadDelay
		}
		d = time.Duration(ms) * time.Millisecond
	} else {
		d, err = time.ParseDuration(v)
		if err != nil || d > maxDelay || d < -maxDelay {
			return 0, ErrBadDelay
		}
	}
	if d < 0 {
		return 0, ErrNegativeDelay
	}
	return d, nil
}

// maxDeliverAtMs bounds absolute due times to the years 1970..9999.
var maxDeliverAtMs = time.Date(9999, 12, 31, 0, 0, 0, 0, time.UTC).UnixMilli()

// parseDeliverAt accepts epoch milliseconds or RFC 3339.
func parseDeliverAt(v string) (time.Time, error) {
	v = strings.TrimSpace(v)
	if ms, err := strconv.ParseInt(v, 10, 64); err == nil {
		if ms < 0 || ms > maxDeliverAtMs {
			return time.Time{}, ErrBadDeliverAt
		}
		return time.UnixMilli(ms), nil
	}
	t, err := time.Parse(time.RFC3339Nano, v)
	if err != nil || t.Year() < 1970 || t.UnixMilli() > maxDeliverAtMs {
		return time.Time{}, ErrBadDeliverAt
	}
	return t, nil
}

// ValidTopicName checks a topic name by Kafka's rules: 1..249 characters of
// [a-zA-Z0-9._-], not "." or "..".
func ValidTopicName(name string) error {
	if name == "" || len(name) > 249 || name == "." || name == ".." {
		return fmt.Errorf("levels: invalid topic name %q", name)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return fmt.Errorf("levels: invalid topic name %q: character %q", name, c)
		}
	}
	return nil
}

// IsControl reports whether a header key is one of kdelay's headers.
func IsControl(key string) bool { return strings.HasPrefix(key, HeaderPrefix) }

// ForwardHeaders returns the headers of the forwarded copy: the producer's
// own headers in order, without any kdelay- header, plus [HeaderDueAt],
// [HeaderSource] and, when the record has one, its [HeaderID] (the last
// one, as Parse reads it). hs is not modified; the copy shares the values
// of the headers it keeps with hs.
func ForwardHeaders(hs []kgo.RecordHeader, due time.Time, source string) []kgo.RecordHeader {
	buf := strconv.AppendInt(make([]byte, 0, 20+len(source)), due.UnixMilli(), 10)
	n := len(buf)
	buf = append(buf, source...)
	return forwardHeaders(hs, buf[:n:n], buf[n:])
}

// ForwardHeadersFrom is [ForwardHeaders] with the source given as the
// delay-topic record's topic, partition and offset ([Source]); it builds
// both new header values in one allocation (the relay's hot path).
func ForwardHeadersFrom(hs []kgo.RecordHeader, due time.Time, topic string, partition int32, offset int64) []kgo.RecordHeader {
	buf := strconv.AppendInt(make([]byte, 0, 20+len(topic)+32), due.UnixMilli(), 10)
	n := len(buf)
	buf = appendSource(buf, topic, partition, offset)
	return forwardHeaders(hs, buf[:n:n], buf[n:])
}

// AppendForwardHeaders is [ForwardHeadersFrom] built in the caller's
// storage: the headers are appended to dst[:0] and the two new header
// values to buf[:0], each growing as append does when too small. The
// relay passes arrays of the struct it builds the forward in, so that a
// forward allocates nothing of its own when they suffice.
func AppendForwardHeaders(dst []kgo.RecordHeader, buf []byte, hs []kgo.RecordHeader, due time.Time, topic string, partition int32, offset int64) []kgo.RecordHeader {
	buf = strconv.AppendInt(buf[:0], due.UnixMilli(), 10)
	n := len(buf)
	buf = appendSource(buf, topic, partition, offset)
	return appendForwardHeaders(dst[:0], hs, buf[:n:n], buf[n:len(buf):len(buf)])
}

func forwardHeaders(hs []kgo.RecordHeader, dueAt, source []byte) []kgo.RecordHeader {
	return appendForwardHeaders(make([]kgo.RecordHeader, 0, len(hs)+3), hs, dueAt, source)
}

func appendForwardHeaders(out, hs []kgo.RecordHeader, dueAt, source []byte) []kgo.RecordHeader {
	id := -1
	for i, h := range hs {
		if !IsControl(h.Key) {
			out = append(out, h)
		} else if h.Key == HeaderID {
			id = i
		}
	}
	out = append(out,
		kgo.RecordHeader{Key: HeaderDueAt, Value: dueAt},
		kgo.RecordHeader{Key: HeaderSource, Value: source},
	)
	if id >= 0 {
		out = append(out, kgo.RecordHeader{Key: HeaderID, Value: hs[id].Value})
	}
	return out
}

// OriginalTimestamp returns the timestamp a delayed record had as its
// producer wrote it: the [HeaderOriginalTimestamp] of a cascaded copy,
// else ts (the record's own timestamp). Cancels compare their cut-off
// with it.
func OriginalTimestamp(hs []kgo.RecordHeader, ts time.Time) time.Time {
	if v, ok := lastHeader(hs, HeaderOriginalTimestamp); ok {
		if ms, err := strconv.ParseInt(v, 10, 64); err == nil {
			return time.UnixMilli(ms)
		}
	}
	return ts
}

// ID returns the record's [HeaderID], "" when none.
func ID(hs []kgo.RecordHeader) string {
	v, _ := lastHeader(hs, HeaderID)
	return v
}

// DeadLetterHeaders returns the headers of the dead-lettered copy: every
// original header, plus [HeaderError] with the reason and [HeaderSource].
// An earlier kdelay-error or kdelay-source is replaced. hs is not modified.
func DeadLetterHeaders(hs []kgo.RecordHeader, reason, source string) []kgo.RecordHeader {
	out := make([]kgo.RecordHeader, 0, len(hs)+2)
	for _, h := range hs {
		if h.Key != HeaderError && h.Key != HeaderSource {
			out = append(out, h)
		}
	}
	return append(out,
		kgo.RecordHeader{Key: HeaderError, Value: []byte(reason)},
		kgo.RecordHeader{Key: HeaderSource, Value: []byte(source)},
	)
}

// CascadeHeaders returns the headers of a record re-produced to the delay
// topic because its due time lies beyond the wheel horizon: the original
// headers with the schedule replaced by an absolute [HeaderDeliverAt], so
// that the due time never drifts. hs is not modified.
func CascadeHeaders(hs []kgo.RecordHeader, due time.Time) []kgo.RecordHeader {
	out := make([]kgo.RecordHeader, 0, len(hs)+1)
	for _, h := range hs {
		switch h.Key {
		case HeaderDelay, HeaderLevel, HeaderDeliverAt:
		default:
			out = append(out, h)
		}
	}
	return append(out, kgo.RecordHeader{Key: HeaderDeliverAt, Value: strconv.AppendInt(nil, due.UnixMilli(), 10)})
}

// CascadeHeadersAt is [CascadeHeaders] for a record whose timestamp is ts:
// when the record has no [HeaderOriginalTimestamp] yet (its first
// cascade), one with ts is added, so that the comparison with a cancel's
// cut-off uses the producer's timestamp however often the record
// cascades. hs is not modified.
func CascadeHeadersAt(hs []kgo.RecordHeader, due, ts time.Time) []kgo.RecordHeader {
	out := CascadeHeaders(hs, due)
	if _, ok := lastHeader(hs, HeaderOriginalTimestamp); !ok {
		out = append(out, kgo.RecordHeader{Key: HeaderOriginalTimestamp, Value: strconv.AppendInt(nil, ts.UnixMilli(), 10)})
	}
	return out
}

// Source formats the kdelay-source value of a record.
func Source(topic string, partition int32, offset int64) string {
	return string(appendSource(make([]byte, 0, len(topic)+32), topic, partition, offset))
}

func appendSource(b []byte, topic string, partition int32, offset int64) []byte {
	b = append(b, topic...)
	b = append(b, '/')
	b = strconv.AppendInt(b, int64(partition), 10)
	b = append(b, '/')
	return strconv.AppendInt(b, offset, 10)
}
