// Package levels is kdelay's producer contract: the table of delay levels,
// the mapping of levels to partitions of the delay topic, and the headers a
// producer sets on a delayed record.
//
// # Levels and partitions
//
// A level table is an increasing list of durations, written as RocketMQ's
// messageDelayLevel: "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m
// 1h 2h" ([DefaultSpec], 18 levels). Level i (1-based) owns the partitions
// [(i-1)*k, i*k) of the delay topic, where k is the number of partitions per
// level (default 1, so 18 partitions). A producer picks the level whose
// duration is the largest one not above the delay (level 1 for shorter
// delays) and, inside the level, the partition by key hash: Kafka's murmur2,
// as the Java client's default partitioner computes it, so producers in any
// language can compute the same partition.
//
// The partition is only a hint. The relay reads the due time from the
// headers (see [Parse]) and never forwards a record before it, whichever
// partition it was written to.
//
// # Headers
//
// See the Header* constants. Due time = [HeaderDeliverAt] if present, else
// the record timestamp + [HeaderDelay], else the record timestamp + the
// duration of [HeaderLevel]. [ForwardHeaders] and [DeadLetterHeaders] rewrite
// headers for the forwarded and the dead-lettered copy.
//
// The package holds no Kafka client; it uses franz-go's record types only so
// that Go producers can stamp a *kgo.Record with [Table.Stamp].
package levels

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// DefaultSpec is RocketMQ 4.x's default messageDelayLevel: 18 levels.
const DefaultSpec = "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"

// MaxPartitions bounds levels x partitions-per-level; Kafka handles far more
// partitions per topic, but a delay topic this large is a configuration
// mistake.
const MaxPartitions = 100_000

// ErrSpec is wrapped by every error of [ParseSpec].
var ErrSpec = errors.New("levels: invalid level list")

// ParseSpec parses a level list written as RocketMQ's messageDelayLevel:
// durations separated by spaces or commas, each a Go duration ("90s",
// "1h30m") or a whole number of days ("1d", RocketMQ's unit). The list must
// be non-empty and strictly increasing, every entry positive. Errors name
// the bad token and wrap [ErrSpec].
func ParseSpec(spec string) ([]time.Duration, error) {
	tokens := strings.FieldsFunc(spec, func(r rune) bool {
		return r == ' ' || r == ',' || r == '\t' || r == '\n' || r == '\r'
	})
	if len(tokens) == 0 {
		return nil, fmt.Errorf("%w: empty", ErrSpec)
	}
	durs := make([]time.Duration, 0, len(tokens))
	for i, tok := range tokens {
		d, err := parseLevelToken(tok)
		if err != nil {
			return nil, fmt.Errorf("%w: entry %d %q: %v", ErrSpec, i+1, tok, err)
		}
		if d <= 0 {
			return nil, fmt.Errorf("%w: entry %d %q: must be positive", ErrSpec, i+1, tok)
		}
		if i > 0 && d <= durs[i-1] {
			return nil, fmt.Errorf("%w: entry %d %q: not greater than the previous entry %q", ErrSpec, i+1, tok, tokens[i-1])
		}
		durs = append(durs, d)
	}
	return durs, nil
}

func parseLevelToken(tok string) (time.Duration, error) {
	if days, ok := strings.CutSuffix(tok, "d"); ok {
		n, err := strconv.ParseInt(days, 10, 64)
		if err != nil {
			return 0, errors.New("not a duration")
		}
		if n > int64(1<<63-1)/int64(24*time.Hour) || n < -int64(1<<63-1)/int64(24*time.Hour) {
			return 0, errors.New("out of range")
		}
		return time.Duration(n) * 24 * time.Hour, nil
	}
	d, err := time.ParseDuration(tok)
	if err != nil {
		return 0, errors.New("not a duration")
	}
	return d, nil
}

// Table maps delay levels to partitions of the delay topic. It is immutable
// and safe for concurrent use.
type Table struct {
	durs     []time.Duration
	perLevel int32
	zones    sync.Map // IANA name -> *time.Location, of series read so far
	// targets holds the target topic names read so far (at most
	// maxTargets; copied on write), so that reading a schedule does not
	// allocate its target's name again for every record.
	targets atomic.Pointer[map[string]string]
}

// New returns the table for the given levels (as returned by [ParseSpec])
// with perLevel partitions per level.
func New(durs []time.Duration, perLevel int) (*Table, error) {
	if len(durs) == 0 {
		return nil, fmt.Errorf("%w: empty", ErrSpec)
	}
	for i, d := range durs {
		if d <= 0 || (i > 0 && d <= durs[i-1]) {
			return nil, fmt.Errorf("%w: entry %d (%s) is not positive and increasing", ErrSpec, i+1, d)
		}
	}
	if perLevel < 1 {
		return nil, fmt.Errorf("levels: partitions per level %d: must be at least 1", perLevel)
	}
	if len(durs)*perLevel > MaxPartitions {
		return nil, fmt.Errorf("levels: %d levels x %d partitions per level exceeds %d partitions", len(durs), perLevel, MaxPartitions)
	}
	return &Table{durs: append([]time.Duration(nil), durs...), perLevel: int32(perLevel)}, nil
}

// Parse is [ParseSpec] followed by [New].
func Parse(spec string, perLevel int) (*Table, error) {
	durs, err := ParseSpec(spec)
	if err != nil {
		return nil, err
	}
	return New(durs, perLevel)
}

// Default returns the 18 RocketMQ levels with one partition each.
func Default() *Table {
	t, err := Parse(DefaultSpec, 1)
	if err != nil {
		panic(err) // DefaultSpec is a constant that parses.
	}
	return t
}

// Levels returns the number of levels.
func (t *Table) Levels() int { return len(t.durs) }

// PerLevel returns the number of partitions per level.
func (t *Table) PerLevel() int { return int(t.perLevel) }

// Partitions returns the partition count the delay topic must have:
// levels x partitions per level.
func (t *Table) Partitions() int32 { return int32(len(t.durs)) * t.perLevel }

// Durations returns a copy of the level durations, level 1 first.
func (t *Table) Durations() []time.Duration { return append([]time.Duration(nil), t.durs...) }

// Duration returns the duration of level (1-based); 0 if out of range.
func (t *Table) Duration(level int) time.Duration {
	if level < 1 || level > len(t.durs) {
		return 0
	}
	return t.durs[level-1]
}

// String returns the table in messageDelayLevel form.
func (t *Table) String() string {
	parts := make([]string, len(t.durs))
	for i, d := range t.durs {
		parts[i] = FormatDuration(d)
	}
	return strings.Join(parts, " ")
}

// FormatDuration writes d compactly: "1h" rather than Go's "1h0m0s".
func FormatDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = s[:len(s)-2]
	}
	if strings.HasSuffix(s, "h0m") {
		s = s[:len(s)-2]
	}
	return s
}

// Range returns the partitions [from, to) owned by level (1-based).
func (t *Table) Range(level int) (from, to int32) {
	l := int32(level - 1)
	return l * t.perLevel, (l + 1) * t.perLevel
}

// LevelOf returns the level (1-based) that owns partition p, or 0 if p is
// outside the delay topic.
func (t *Table) LevelOf(p int32) int {
	if p < 0 || p >= t.Partitions() {
		return 0
	}
	return int(p/t.perLevel) + 1
}

// LevelFor returns the level for a delay: the largest level whose duration
// is not above delay, or level 1 when delay is shorter than every level.
func (t *Table) LevelFor(delay time.Duration) int {
	level := 1
	for i, d := range t.durs {
		if d > delay {
			break
		}
		level = i + 1
	}
	return level
}

// MaxGap returns the largest gap between consecutive levels (the first
// level's duration counts as the gap from zero). A wheel horizon of MaxGap
// lets every record between two levels wait in the wheel instead of
// cascading.
func (t *Table) MaxGap() time.Duration {
	gap := t.durs[0]
	for i := 1; i < len(t.durs); i++ {
		gap = max(gap, t.durs[i]-t.durs[i-1])
	}
	return gap
}

// PartitionFor returns the delay-topic partition for a record of the given
// level and key: the level's first partition plus murmur2(key) mod k, as
// Kafka's default partitioner hashes keys. A nil key picks a random
// partition of the level. Level is clamped to the table.
func (t *Table) PartitionFor(level int, key []byte) int32 {
	level = min(max(level, 1), len(t.durs))
	from, _ := t.Range(level)
	if t.perLevel == 1 {
		return from
	}
	if key == nil {
		return from + rand.Int32N(t.perLevel)
	}
	return from + int32(murmur2(key)&0x7fffffff)%t.perLevel
}

// murmur2 is the hash of Kafka's Java client (Utils.murmur2), used by its
// default partitioner for keyed records.
func murmur2(b []byte) uint32 {
	const (
		seed uint32 = 0x9747b28c
		m    uint32 = 0x5bd1e995
		r           = 24
	)
	h := seed ^ uint32(len(b))
	for ; len(b) >= 4; b = b[4:] {
		k := uint32(b[0]) | uint32(b[1])<<8 | uint32(b[2])<<16 | uint32(b[3])<<24
		k *= m
		k ^= k >> r
		k *= m
		h *= m
		h ^= k
	}
	switch len(b) {
	case 3:
		h ^= uint32(b[2]) << 16
		fallthrough
	case 2:
		h ^= uint32(b[1]) << 8
		fallthrough
	case 1:
		h ^= uint32(b[0])
		h *= m
	}
	h ^= h >> 13
	h *= m
	h ^= h >> 15
	return h
}
