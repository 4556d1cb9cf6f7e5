package levels

// The shared test vectors of the producer contract: testdata/contract/*.json
// at the repository root. Go is the reference: this test computes every
// expected value with this package and compares the result with the files
// byte for byte, so a change of the contract fails here until the vectors
// are regenerated (go test ./levels -run TestContractVectors -update) and
// the Java and Python helpers (clients/java, clients/python), which check
// the same files, are brought along.

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/twmb/franz-go/pkg/kgo"
)

var updateVectors = flag.Bool("update", false, "rewrite testdata/contract/*.json from the Go implementation")

const contractDir = "../testdata/contract"

// vKey is how a record key appears in a vector.
type vKey struct {
	Key    *string `json:"key"`
	KeyHex string  `json:"key_hex,omitempty"`
}

func keyOf(b []byte) vKey {
	if b == nil {
		return vKey{}
	}
	if utf8.Valid(b) {
		s := string(b)
		return vKey{Key: &s}
	}
	return vKey{KeyHex: hex.EncodeToString(b)}
}

// vHeader is a record header in a vector.
type vHeader struct {
	Key      string  `json:"key"`
	Value    *string `json:"value,omitempty"`
	ValueHex string  `json:"value_hex,omitempty"`
}

func headersOf(hs []kgo.RecordHeader) []vHeader {
	out := make([]vHeader, 0, len(hs))
	for _, h := range hs {
		vh := vHeader{Key: h.Key}
		if utf8.Valid(h.Value) {
			s := string(h.Value)
			vh.Value = &s
		} else {
			vh.ValueHex = hex.EncodeToString(h.Value)
		}
		out = append(out, vh)
	}
	return out
}

// vhdrs builds headers from key, value pairs; a value starting with "hex:"
// is hex-decoded (binary values).
func vhdrs(kv ...string) []kgo.RecordHeader {
	hs := make([]kgo.RecordHeader, 0, len(kv)/2)
	for i := 0; i+1 < len(kv); i += 2 {
		v := []byte(kv[i+1])
		if h, ok := strings.CutPrefix(kv[i+1], "hex:"); ok {
			b, err := hex.DecodeString(h)
			if err != nil {
				panic(err)
			}
			v = b
		}
		hs = append(hs, kgo.RecordHeader{Key: kv[i], Value: v})
	}
	return hs
}

// ---------------------------------------------------------------- murmur2

type murmurVector struct {
	vKey
	// Murmur2 is Utils.murmur2 of the Java client: a signed 32-bit int.
	Murmur2 int32 `json:"murmur2"`
	// Positive is Utils.toPositive(murmur2) = murmur2 & 0x7fffffff.
	Positive int32 `json:"positive"`
}

type murmurFile struct {
	About   string         `json:"about"`
	Vectors []murmurVector `json:"vectors"`
}

func murmurKeys() [][]byte {
	keys := [][]byte{
		{}, []byte("a"), []byte("ab"), []byte("abc"), []byte("abcd"), []byte("abcde"),
		[]byte("21"), []byte("foobar"), []byte("a-little-bit-long-string"), []byte("a-little-bit-longer-string"),
		[]byte("lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8"),
		[]byte("order-17"), []byte("order-18"), []byte("user:42"), []byte(" "), []byte("key with spaces"),
		[]byte("ключ"), []byte("日本語キー"), []byte("🔑"), []byte("naïve café"), []byte("Ω≈ç√∫"),
		[]byte(strings.Repeat("0123456789", 10)),
		{0x00}, {0xff}, {0x80, 0x81, 0x82}, {0xff, 0xfe, 0xfd, 0xfc}, {0xde, 0xad, 0xbe, 0xef, 0x01},
	}
	all := make([]byte, 256)
	for i := range all {
		all[i] = byte(i)
	}
	return append(keys, all)
}

// javaMurmur2 are values published by Kafka's own UtilsTest.testMurmur2:
// they pin the Go port to the Java client independently of the vectors.
var javaMurmur2 = map[string]int32{
	"21":                         -973932308,
	"foobar":                     -790332482,
	"a-little-bit-long-string":   -985981536,
	"a-little-bit-longer-string": -1486304829,
	"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
	"abc": 479470107,
}

func buildMurmur(t *testing.T) murmurFile {
	f := murmurFile{About: "Kafka's murmur2 (org.apache.kafka.common.utils.Utils.murmur2, the Java client's default partitioner hash) of the key bytes; positive = murmur2 & 0x7fffffff (Utils.toPositive). Keys: key (UTF-8 text) or key_hex (bytes)."}
	for _, k := range murmurKeys() {
		h := int32(murmur2(k))
		if want, ok := javaMurmur2[string(k)]; ok && h != want {
			t.Errorf("murmur2(%q) = %d, Kafka's UtilsTest says %d", k, h, want)
		}
		f.Vectors = append(f.Vectors, murmurVector{vKey: keyOf(k), Murmur2: h, Positive: h & 0x7fffffff})
	}
	return f
}

// ----------------------------------------------------------------- tables

type tableVector struct {
	Spec     string `json:"spec"`
	PerLevel int    `json:"per_level"`
	// Error is true when Parse(spec, per_level) fails.
	Error      bool    `json:"error,omitempty"`
	DurationNs []int64 `json:"durations_ns,omitempty"`
	Partitions int32   `json:"partitions,omitempty"`
	// Ranges[i] is [from, to) of level i+1.
	Ranges [][2]int32 `json:"ranges,omitempty"`
	// LevelFor maps delays (ns) to their level.
	LevelFor []levelForVector `json:"level_for,omitempty"`
	// PartitionFor maps (level, key) to the delay-topic partition.
	PartitionFor []partitionVector `json:"partition_for,omitempty"`
}

type levelForVector struct {
	DelayNs int64 `json:"delay_ns"`
	Level   int   `json:"level"`
}

type partitionVector struct {
	Level int `json:"level"`
	vKey
	// Partition is the partition; null when the key is null and the level
	// has several partitions (any of [from, to) then, chosen at random).
	Partition *int32 `json:"partition"`
	From      int32  `json:"from"`
	To        int32  `json:"to"`
}

type tablesFile struct {
	About  string        `json:"about"`
	Tables []tableVector `json:"tables"`
}

func buildTables(t *testing.T) tablesFile {
	f := tablesFile{About: "Level tables: Parse(spec, per_level) -> durations (ns), partitions, level ranges [from, to); level_for(delay ns) = the largest level whose duration <= delay, else 1; partition_for(level, key) = from + toPositive(murmur2(key)) % per_level (level clamped to 1..levels; a null key with per_level > 1: any partition of the level, partition null)."}
	for _, tc := range []struct {
		spec     string
		perLevel int
	}{
		{DefaultSpec, 1},
		{DefaultSpec, 3},
		{DefaultSpec + " 1d", 1},
		{"1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h 6h 12h 1d 2d 7d", 4},
		{"1s,2s, 4s\t8s", 2},
		{"500ms 1h30m 1d 2d", 5},
		{"100us 1.5ms 1m", 7},
		{"1d", 16},
		{"+1d 2d", 1},
		{"1h 2h", 1},
		// Errors.
		{"", 1}, {" , ", 1}, {"1s 1s", 1}, {"5s 1s", 1}, {"0s", 1}, {"1s -5s", 1}, {"1s 5x", 1},
		{"1s abcd", 1}, {"99999999999d", 1}, {"1.5d", 1}, {"d", 1}, {"-1d", 1}, {"1s;2s", 1},
		{"1s", 0}, {"1s", -1}, {"1s 2s", MaxPartitions/2 + 1}, {"1s 2s", MaxPartitions / 2},
	} {
		v := tableVector{Spec: tc.spec, PerLevel: tc.perLevel}
		tab, err := Parse(tc.spec, tc.perLevel)
		if err != nil {
			v.Error = true
			f.Tables = append(f.Tables, v)
			continue
		}
		for _, d := range tab.Durations() {
			v.DurationNs = append(v.DurationNs, int64(d))
		}
		v.Partitions = tab.Partitions()
		if tab.Partitions() <= 200 {
			for l := 1; l <= tab.Levels(); l++ {
				from, to := tab.Range(l)
				v.Ranges = append(v.Ranges, [2]int32{from, to})
			}
		}
		// Delays: 0, negative, each level's duration and 1 ns / 1 ms either side.
		delays := []time.Duration{0, -time.Second, -1, 1, 1<<63 - 1}
		for _, d := range tab.Durations() {
			delays = append(delays, d-time.Millisecond, d-1, d, d+1, d+time.Millisecond)
		}
		if tab.Levels() > 6 {
			delays = append(delays, 90*time.Second, 25*time.Hour)
		}
		for _, d := range delays {
			v.LevelFor = append(v.LevelFor, levelForVector{DelayNs: int64(d), Level: tab.LevelFor(d)})
		}
		keys := [][]byte{nil, {}, []byte("order-17"), []byte("ключ"), []byte("🔑"), {0xff, 0x00, 0x80}, []byte("foobar"), []byte("user:42")}
		for _, level := range []int{0, 1, 2, tab.Levels(), tab.Levels() + 1} {
			for _, k := range keys {
				p := tab.PartitionFor(level, k)
				clamped := min(max(level, 1), tab.Levels())
				from, to := tab.Range(clamped)
				if p < from || p >= to {
					t.Errorf("%q k=%d: PartitionFor(%d, %q) = %d outside [%d,%d)", tc.spec, tc.perLevel, level, k, p, from, to)
				}
				pv := partitionVector{Level: level, vKey: keyOf(k), From: from, To: to}
				if k != nil || tab.PerLevel() == 1 {
					pv.Partition = &p
				}
				v.PartitionFor = append(v.PartitionFor, pv)
			}
		}
		f.Tables = append(f.Tables, v)
	}
	return f
}

// ------------------------------------------------------------------ parse

type parseWant struct {
	Target          string `json:"target"`
	TargetPartition int32  `json:"target_partition"`
	DueMs           int64  `json:"due_ms"`
	DelayMs         int64  `json:"delay_ms"`
	// Level is LevelFor(delay): the level whose partitions the record
	// belongs in (what the Java interceptor places it by).
	Level int `json:"level"`
}

type parseErr struct {
	// Reason is levels.Reason(err): the dead-letter reason label.
	Reason string `json:"reason"`
	// Header is the offending header, "" when none was given.
	Header string `json:"header"`
}

type parseVector struct {
	Name        string     `json:"name"`
	Spec        string     `json:"spec"`
	PerLevel    int        `json:"per_level"`
	TimestampMs int64      `json:"timestamp_ms"`
	Headers     []vHeader  `json:"headers"`
	Want        *parseWant `json:"want,omitempty"`
	Error       *parseErr  `json:"error,omitempty"`
}

type parseFile struct {
	About   string        `json:"about"`
	Vectors []parseVector `json:"vectors"`
}

func buildParse(t *testing.T) parseFile {
	f := parseFile{About: "Header parsing, as the relay reads a delay-topic record: (level table, record timestamp ms, headers in order) -> target, target partition (-1: the key decides), due time (epoch ms), delay = due - timestamp (ms, exact; Go's Schedule.Delay saturates beyond 292 years), level = level_for(delay); or the contract error: reason (levels.Reason, the dead-letter label) and the offending header. When a header repeats, the last one counts."}
	const ts = 1_764_579_600_000 // 2025-12-01T09:00:00Z
	const tg = HeaderTarget
	type c struct {
		name string
		spec string
		k    int
		ts   int64
		hs   []kgo.RecordHeader
	}
	def, day := DefaultSpec, DefaultSpec+" 1d"
	cases := []c{
		{"delay go duration", def, 1, ts, vhdrs(tg, "orders", HeaderDelay, "90s")},
		{"delay composite", def, 1, ts, vhdrs(tg, "orders", HeaderDelay, "1h30m")},
		{"delay fraction of hour", def, 1, ts, vhdrs(tg, "orders", HeaderDelay, "1.5h")},
		{"delay fraction rounds up to ms", def, 1, ts, vhdrs(tg, "orders", HeaderDelay, "1.0001s")},
		{"delay sub-ms", def, 1, ts, vhdrs(tg, "orders", HeaderDelay, "1ns")},
		{"delay us", def, 1, ts, vhdrs(tg, "orders", HeaderDelay, "2500us")},
		{"delay micro sign", def, 1, ts, vhdrs(tg, "orders", HeaderDelay, "7µs")},
		{"delay greek mu", def, 1, ts, vhdrs(tg, "orders", HeaderDelay, "7μs")},
		{"delay ms unit", def, 1, ts, vhdrs(tg, "orders", HeaderDelay, "250ms")},
		{"delay leading dot", def, 1, ts, vhdrs(tg, "orders", HeaderDelay, ".5s")},
		{"delay trailing dot", def, 1, ts, vhdrs(tg, "orders", HeaderDelay, "5.s")},
		{"delay plus sign", def, 1, ts, vhdrs(tg, "orders", HeaderDelay, "+5s")},
		{"delay zero", def, 1, ts, vhdrs(tg, "orders", HeaderDelay, "0")},
		{"delay zero seconds", def, 1, ts, vhdrs(tg, "orders", HeaderDelay, "0s")},
		{"delay minus zero", def, 1, ts, vhdrs(tg, "orders", HeaderDelay, "-0s")},
		{"delay milliseconds", def, 1, ts, vhdrs(tg, "orders", HeaderDelay, "90000")},
		{"delay milliseconds plus", def, 1, ts, vhdrs(tg, "orders", HeaderDelay, "+1000")},
		{"delay milliseconds leading zeros", def, 1, ts, vhdrs(tg, "orders", HeaderDelay, "007")},
		{"delay spaces trimmed", def, 1, ts, vhdrs(tg, "orders", HeaderDelay, " \t30s\n")},
		{"delay unicode space trimmed", def, 1, ts, vhdrs(tg, "orders", HeaderDelay, "\u00a030s\u3000")},
		{"delay many fraction digits", def, 1, ts, vhdrs(tg, "orders", HeaderDelay, "1.000000000000000000000001s")},
		{"delay float rounding", def, 1, ts, vhdrs(tg, "orders", HeaderDelay, "0.3333333333h")},
		// Go computes fractions in float64 and truncates: 8000001 ns exactly,
		// 8000000 ns in Go, so due in 8 ms, not 9.
		{"delay float64 fraction truncation", def, 1, ts, vhdrs(tg, "orders", HeaderDelay, "0.00000222222250h")},
		{"delay float64 fraction truncation long", def, 1, ts, vhdrs(tg, "orders", HeaderDelay, "0.288232222222500000h")},
		{"delay float64 fraction truncation minutes", def, 1, ts, vhdrs(tg, "orders", HeaderDelay, "0.00003333335000m")},
		{"delay long fraction hours", def, 1, ts, vhdrs(tg, "orders", HeaderDelay, "1.99999999999999999999h")},
		{"delay max 100y", day, 1, ts, vhdrs(tg, "orders", HeaderDelay, "876000h")},
		{"delay max ms", def, 1, ts, vhdrs(tg, "orders", HeaderDelay, "3153600000000")},
		{"delay each level boundary 1s", def, 1, ts, vhdrs(tg, "orders", HeaderDelay, "1s")},
		{"delay just below 5s", def, 1, ts, vhdrs(tg, "orders", HeaderDelay, "4999ms")},
		{"delay exactly 5s", def, 1, ts, vhdrs(tg, "orders", HeaderDelay, "5s")},
		{"delay just below 2h", def, 1, ts, vhdrs(tg, "orders", HeaderDelay, "7199999")},
		{"delay 2h", def, 1, ts, vhdrs(tg, "orders", HeaderDelay, "2h")},
		{"delay 1d on a 1d table", day, 1, ts, vhdrs(tg, "orders", HeaderDelay, "24h")},
		{"delay below 1d on a 1d table", day, 1, ts, vhdrs(tg, "orders", HeaderDelay, "23h59m59.999s")},
		{"delay k>1", DefaultSpec, 4, ts, vhdrs(tg, "orders", HeaderDelay, "10m")},
		{"delay wins over level", def, 1, ts, vhdrs(tg, "orders", HeaderLevel, "3", HeaderDelay, "2m")},
		{"repeated delay last counts", def, 1, ts, vhdrs(tg, "orders", HeaderDelay, "9s", HeaderDelay, "3s")},
		{"repeated target last counts", def, 1, ts, vhdrs(tg, "first", tg, "second", HeaderDelay, "3s")},
		{"level", def, 1, ts, vhdrs(tg, "orders", HeaderLevel, "3")},
		{"level last", def, 1, ts, vhdrs(tg, "orders", HeaderLevel, "18")},
		{"level 19 of 1d table", day, 2, ts, vhdrs(tg, "orders", HeaderLevel, "19")},
		{"level plus and spaces", def, 1, ts, vhdrs(tg, "orders", HeaderLevel, " +02 ")},
		{"deliver-at epoch ms", def, 1, ts, vhdrs(tg, "orders", HeaderDeliverAt, "1764579690000")},
		{"deliver-at wins over delay", def, 1, ts, vhdrs(tg, "orders", HeaderDelay, "1h", HeaderDeliverAt, "1764579605000")},
		{"deliver-at wins over level", def, 1, ts, vhdrs(tg, "orders", HeaderDeliverAt, "1764579605000", HeaderLevel, "18")},
		{"deliver-at in the past", def, 1, ts, vhdrs(tg, "orders", HeaderDeliverAt, "1764579500000")},
		{"deliver-at zero", def, 1, ts, vhdrs(tg, "orders", HeaderDeliverAt, "0")},
		{"deliver-at rfc3339 Z", def, 1, ts, vhdrs(tg, "orders", HeaderDeliverAt, "2025-12-01T09:01:30Z")},
		{"deliver-at rfc3339 offset", def, 1, ts, vhdrs(tg, "orders", HeaderDeliverAt, "2025-12-01T10:01:30+01:00")},
		{"deliver-at rfc3339 negative offset", def, 1, ts, vhdrs(tg, "orders", HeaderDeliverAt, "2025-12-01T04:31:30-04:30")},
		{"deliver-at rfc3339 nanos round up", def, 1, ts, vhdrs(tg, "orders", HeaderDeliverAt, "2025-12-01T09:01:30.000000001Z")},
		{"deliver-at rfc3339 millis", def, 1, ts, vhdrs(tg, "orders", HeaderDeliverAt, "2025-12-01T09:01:30.250Z")},
		{"deliver-at rfc3339 ten fraction digits", def, 1, ts, vhdrs(tg, "orders", HeaderDeliverAt, "2025-12-01T09:01:30.1234567891Z")},
		{"deliver-at rfc3339 comma fraction", def, 1, ts, vhdrs(tg, "orders", HeaderDeliverAt, "2025-12-01T09:01:30,5Z")},
		{"deliver-at rfc3339 one-digit hour", def, 1, ts, vhdrs(tg, "orders", HeaderDeliverAt, "2025-12-01T9:01:30Z")},
		{"deliver-at rfc3339 offset 24h", def, 1, ts, vhdrs(tg, "orders", HeaderDeliverAt, "2025-12-02T09:01:30+24:00")},
		{"deliver-at rfc3339 leap day", def, 1, ts, vhdrs(tg, "orders", HeaderDeliverAt, "2028-02-29T00:00:00Z")},
		{"deliver-at rfc3339 1970", def, 1, ts, vhdrs(tg, "orders", HeaderDeliverAt, "1970-01-01T00:00:00Z")},
		{"deliver-at rfc3339 1970 in its own zone, before 1970 in UTC", def, 1, ts, vhdrs(tg, "orders", HeaderDeliverAt, "1970-01-01T00:30:00+01:00")},
		{"deliver-at rfc3339 max zone offset", def, 1, ts, vhdrs(tg, "orders", HeaderDeliverAt, "2025-12-01T09:01:30-24:60")},
		{"deliver-at rfc3339 spaces", def, 1, ts, vhdrs(tg, "orders", HeaderDeliverAt, " 2025-12-01T09:01:30Z ")},
		{"deliver-at last day accepted", def, 1, ts, vhdrs(tg, "orders", HeaderDeliverAt, "9999-12-31T00:00:00Z")},
		{"deliver-at max ms", def, 1, ts, vhdrs(tg, "orders", HeaderDeliverAt, "253402214400000")},
		{"target partition", def, 1, ts, vhdrs(tg, "orders", HeaderDelay, "1s", HeaderTargetPartition, "7")},
		{"target partition spaces", def, 1, ts, vhdrs(tg, "orders", HeaderDelay, "1s", HeaderTargetPartition, " 0 ")},
		{"target partition max int32", def, 1, ts, vhdrs(tg, "orders", HeaderDelay, "1s", HeaderTargetPartition, "2147483647")},
		{"target name characters", def, 1, ts, vhdrs(tg, "Orders.v2_eu-1", HeaderDelay, "1s")},
		{"target 249 chars", def, 1, ts, vhdrs(tg, strings.Repeat("t", 249), HeaderDelay, "1s")},
		{"own headers ignored", def, 1, ts, vhdrs("trace", "abc", tg, "orders", "kdelay-id", "x", HeaderDelay, "1s", "bin", "hex:00ff")},
		{"timestamp zero", def, 1, 0, vhdrs(tg, "orders", HeaderDelay, "5s")},
		{"timestamp -1 (none)", def, 1, -1, vhdrs(tg, "orders", HeaderDelay, "5s")},
		{"timestamp before 1970 and level", def, 1, -10_000, vhdrs(tg, "orders", HeaderLevel, "2")},
		{"timestamp with deliver-at", def, 1, -1, vhdrs(tg, "orders", HeaderDeliverAt, "1000")},
		// Errors, with their dead-letter reason.
		{"no headers", def, 1, ts, nil},
		{"missing target", def, 1, ts, vhdrs(HeaderDelay, "1s")},
		{"empty target", def, 1, ts, vhdrs(tg, "", HeaderDelay, "1s")},
		{"target with space", def, 1, ts, vhdrs(tg, "my topic", HeaderDelay, "1s")},
		{"target dot", def, 1, ts, vhdrs(tg, ".", HeaderDelay, "1s")},
		{"target dotdot", def, 1, ts, vhdrs(tg, "..", HeaderDelay, "1s")},
		{"target 250 chars", def, 1, ts, vhdrs(tg, strings.Repeat("t", 250), HeaderDelay, "1s")},
		{"target unicode", def, 1, ts, vhdrs(tg, "заказы", HeaderDelay, "1s")},
		{"target slash", def, 1, ts, vhdrs(tg, "a/b", HeaderDelay, "1s")},
		{"target empty last wins", def, 1, ts, vhdrs(tg, "orders", tg, "", HeaderDelay, "1s")},
		{"no schedule", def, 1, ts, vhdrs(tg, "orders")},
		{"id", def, 1, ts, vhdrs(tg, "orders", HeaderDelay, "1s", HeaderID, "order-17")},
		{"id of 255 bytes", def, 1, ts, vhdrs(tg, "orders", HeaderDelay, "1s", HeaderID, strings.Repeat("i", 255))},
		{"id of 256 bytes", def, 1, ts, vhdrs(tg, "orders", HeaderDelay, "1s", HeaderID, strings.Repeat("i", 256))},
		{"empty id", def, 1, ts, vhdrs(tg, "orders", HeaderDelay, "1s", HeaderID, "")},
		{"no schedule, only partition", def, 1, ts, vhdrs(tg, "orders", HeaderTargetPartition, "1")},
		{"bad delay", def, 1, ts, vhdrs(tg, "orders", HeaderDelay, "soon")},
		{"bad delay empty", def, 1, ts, vhdrs(tg, "orders", HeaderDelay, "")},
		{"bad delay no unit", def, 1, ts, vhdrs(tg, "orders", HeaderDelay, "1.5")},
		{"bad delay unknown unit", def, 1, ts, vhdrs(tg, "orders", HeaderDelay, "1d")},
		{"bad delay uppercase unit", def, 1, ts, vhdrs(tg, "orders", HeaderDelay, "5S")},
		{"bad delay inner space", def, 1, ts, vhdrs(tg, "orders", HeaderDelay, "5 s")},
		{"bad delay dot only", def, 1, ts, vhdrs(tg, "orders", HeaderDelay, ".s")},
		{"bad delay sign only", def, 1, ts, vhdrs(tg, "orders", HeaderDelay, "-")},
		{"bad delay underscore", def, 1, ts, vhdrs(tg, "orders", HeaderDelay, "1_000")},
		{"bad delay fullwidth digits", def, 1, ts, vhdrs(tg, "orders", HeaderDelay, "１０")},
		{"bad delay arabic-indic digits", def, 1, ts, vhdrs(tg, "orders", HeaderDelay, "١٠s")},
		{"bad delay over 100y", def, 1, ts, vhdrs(tg, "orders", HeaderDelay, "876001h")},
		{"bad delay ms over 100y", def, 1, ts, vhdrs(tg, "orders", HeaderDelay, "3153600000001")},
		{"bad delay overflow", def, 1, ts, vhdrs(tg, "orders", HeaderDelay, "9223372036854775808")},
		{"bad delay duration overflow", def, 1, ts, vhdrs(tg, "orders", HeaderDelay, "9999999999999999999s")},
		{"bad delay due beyond 9999", def, 1, 253402214000000, vhdrs(tg, "orders", HeaderDelay, "1h")},
		{"bad delay binary", def, 1, ts, vhdrs(tg, "orders", HeaderDelay, "hex:ff")},
		{"negative delay", def, 1, ts, vhdrs(tg, "orders", HeaderDelay, "-5s")},
		{"negative delay ms", def, 1, ts, vhdrs(tg, "orders", HeaderDelay, "-1")},
		{"negative delay tiny", def, 1, ts, vhdrs(tg, "orders", HeaderDelay, "-1ns")},
		{"level zero", def, 1, ts, vhdrs(tg, "orders", HeaderLevel, "0")},
		{"level 19 of 18", def, 1, ts, vhdrs(tg, "orders", HeaderLevel, "19")},
		{"level negative", def, 1, ts, vhdrs(tg, "orders", HeaderLevel, "-1")},
		{"level not a number", def, 1, ts, vhdrs(tg, "orders", HeaderLevel, "three")},
		{"level fraction", def, 1, ts, vhdrs(tg, "orders", HeaderLevel, "2.0")},
		{"level empty", def, 1, ts, vhdrs(tg, "orders", HeaderLevel, "")},
		{"bad deliver-at", def, 1, ts, vhdrs(tg, "orders", HeaderDeliverAt, "tomorrow")},
		{"bad deliver-at negative", def, 1, ts, vhdrs(tg, "orders", HeaderDeliverAt, "-1")},
		{"bad deliver-at beyond 9999", def, 1, ts, vhdrs(tg, "orders", HeaderDeliverAt, "253402214400001")},
		{"bad deliver-at before 1970", def, 1, ts, vhdrs(tg, "orders", HeaderDeliverAt, "1969-12-31T23:59:59Z")},
		{"bad deliver-at no zone", def, 1, ts, vhdrs(tg, "orders", HeaderDeliverAt, "2025-12-01T09:01:30")},
		{"bad deliver-at lowercase z", def, 1, ts, vhdrs(tg, "orders", HeaderDeliverAt, "2025-12-01T09:01:30z")},
		{"bad deliver-at lowercase t", def, 1, ts, vhdrs(tg, "orders", HeaderDeliverAt, "2025-12-01t09:01:30Z")},
		{"bad deliver-at space separator", def, 1, ts, vhdrs(tg, "orders", HeaderDeliverAt, "2025-12-01 09:01:30Z")},
		{"bad deliver-at date only", def, 1, ts, vhdrs(tg, "orders", HeaderDeliverAt, "2025-12-01")},
		{"bad deliver-at Feb 29 2025", def, 1, ts, vhdrs(tg, "orders", HeaderDeliverAt, "2025-02-29T00:00:00Z")},
		{"bad deliver-at hour 24", def, 1, ts, vhdrs(tg, "orders", HeaderDeliverAt, "2025-12-01T24:00:00Z")},
		{"bad deliver-at leap second", def, 1, ts, vhdrs(tg, "orders", HeaderDeliverAt, "2025-12-31T23:59:60Z")},
		{"bad deliver-at offset without colon", def, 1, ts, vhdrs(tg, "orders", HeaderDeliverAt, "2025-12-01T09:01:30+0100")},
		{"bad deliver-at offset 25h", def, 1, ts, vhdrs(tg, "orders", HeaderDeliverAt, "2025-12-01T09:01:30+25:00")},
		{"bad deliver-at empty fraction", def, 1, ts, vhdrs(tg, "orders", HeaderDeliverAt, "2025-12-01T09:01:30.Z")},
		{"bad deliver-at year 10000", def, 1, ts, vhdrs(tg, "orders", HeaderDeliverAt, "10000-01-01T00:00:00Z")},
		{"bad deliver-at last day after midnight", def, 1, ts, vhdrs(tg, "orders", HeaderDeliverAt, "9999-12-31T00:00:00.001Z")},
		{"bad deliver-at empty", def, 1, ts, vhdrs(tg, "orders", HeaderDeliverAt, "")},
		{"bad deliver-at wins over good delay", def, 1, ts, vhdrs(tg, "orders", HeaderDelay, "1s", HeaderDeliverAt, "x")},
		{"bad target partition", def, 1, ts, vhdrs(tg, "orders", HeaderDelay, "1s", HeaderTargetPartition, "one")},
		{"negative target partition", def, 1, ts, vhdrs(tg, "orders", HeaderDelay, "1s", HeaderTargetPartition, "-1")},
		{"target partition overflow", def, 1, ts, vhdrs(tg, "orders", HeaderDelay, "1s", HeaderTargetPartition, "2147483648")},
		{"target partition checked before schedule", def, 1, ts, vhdrs(tg, "orders", HeaderTargetPartition, "x")},
		{"target checked first", def, 1, ts, vhdrs(HeaderDelay, "soon", HeaderTargetPartition, "x")},
	}
	for _, tc := range cases {
		tab, err := Parse(tc.spec, tc.k)
		if err != nil {
			t.Fatal(err)
		}
		v := parseVector{Name: tc.name, Spec: tc.spec, PerLevel: tc.k, TimestampMs: tc.ts, Headers: headersOf(tc.hs)}
		s, err := tab.Parse(tc.hs, time.UnixMilli(tc.ts))
		if err != nil {
			ce, ok := err.(*ContractError)
			if !ok {
				t.Fatalf("%s: error %T is not a *ContractError", tc.name, err)
			}
			v.Error = &parseErr{Reason: Reason(err), Header: ce.Header}
			if v.Error.Reason == "other" {
				t.Errorf("%s: reason other for %v", tc.name, err)
			}
		} else {
			v.Want = &parseWant{
				Target: s.Target, TargetPartition: s.TargetPartition,
				DueMs: s.Due.UnixMilli(), DelayMs: s.Due.UnixMilli() - tc.ts,
				Level: tab.LevelFor(s.Delay),
			}
			// Schedule.Delay saturates at Go's ±292 years; below that it is
			// due - timestamp, whole milliseconds.
			if d := s.Delay; d != 1<<63-1 && d != -1<<63 && d != time.Duration(v.Want.DelayMs)*time.Millisecond {
				t.Errorf("%s: delay %s, want %d ms", tc.name, d, v.Want.DelayMs)
			}
		}
		f.Vectors = append(f.Vectors, v)
	}
	return f
}

// ------------------------------------------------------------------ series

type seriesVector struct {
	Name        string    `json:"name"`
	Spec        string    `json:"spec"`
	PerLevel    int       `json:"per_level"`
	TimestampMs int64     `json:"timestamp_ms"`
	Topic       string    `json:"topic"`
	Target      string    `json:"target"`
	ID          string    `json:"id,omitempty"`
	DelayMs     *int64    `json:"delay_ms,omitempty"`
	AtMs        *int64    `json:"at_ms,omitempty"`
	EveryMs     *int64    `json:"every_ms,omitempty"`
	Cron        string    `json:"cron,omitempty"`
	Timezone    string    `json:"timezone,omitempty"`
	UntilMs     *int64    `json:"until_ms,omitempty"`
	Count       *int      `json:"count,omitempty"`
	Headers     []vHeader `json:"headers"`
	vKey
	Error         bool      `json:"error,omitempty"`
	WantPartition *int32    `json:"want_partition,omitempty"`
	WantFrom      int32     `json:"want_from"`
	WantTo        int32     `json:"want_to"`
	WantHeaders   []vHeader `json:"want_headers,omitempty"`
}

type seriesFile struct {
	About   string         `json:"about"`
	Vectors []seriesVector `json:"vectors"`
}

func buildSeries(t *testing.T) seriesFile {
	f := seriesFile{About: "A recurring series stamped by the producer helper (Go: Table.Stamp; Java: KdelayRecord.every/cron; Python: kdelay.delayed(every=, cron=)): as stamp.json, plus id (required), every_ms (kdelay-every, written as whole seconds \"90s\" or else milliseconds \"1500ms\"), cron, timezone, until_ms, count -> the partition of the first occurrence's level (delay_ms, at_ms, else timestamp + every) and the headers in order: the record's own, kdelay-target, the first time if given, kdelay-id, kdelay-every, kdelay-cron, kdelay-timezone, kdelay-until, kdelay-count. Error: no id, every under 1 s, both every and cron, count under 1, until before the first occurrence. A cron series without a first time is placed by the expression's first time (Go only: the other helpers ask for delay or at)."}
	const ts = 1_764_579_600_000 // 2025-12-01T09:00:00Z
	type c struct {
		name  string
		k     int
		key   []byte
		own   []kgo.RecordHeader
		id    string
		delay *int64
		at    *int64
		every *int64
		cron  string
		zone  string
		until *int64
		count *int
	}
	cases := []c{
		{name: "every 1h, first one every after the timestamp", k: 1, key: []byte("report"), id: "hourly", every: ptr[int64](3_600_000)},
		{name: "every 90s after a 5s delay", k: 1, key: []byte("report"), id: "r-90s", delay: ptr[int64](5000), every: ptr[int64](90_000)},
		{name: "every 1500ms from an absolute start", k: 2, key: []byte("order-17"), id: "o17", at: ptr[int64](ts + 10_000), every: ptr[int64](1500)},
		{name: "every with until and count", k: 1, key: nil, id: "u", every: ptr[int64](2000), until: ptr[int64](ts + 60_000), count: ptr(5)},
		{name: "own headers first", k: 1, key: []byte("k"), own: vhdrs("trace", "abc", "bin", "hex:00ff"), id: "own", every: ptr[int64](1000)},
		{name: "cron in a zone from an absolute start", k: 1, key: []byte("standup"), id: "standup", at: ptr[int64](ts + 3*3_600_000), cron: "0 30 9 * * MON-FRI", zone: "Europe/Berlin", count: ptr(3), until: ptr[int64](ts + 72*3_600_000)},
		{name: "cron after a delay", k: 3, key: []byte("tick"), id: "tick", delay: ptr[int64](20_000), cron: "*/10 * * * * *"},
		// Errors.
		{name: "no id", k: 1, every: ptr[int64](1000)},
		{name: "every under 1s", k: 1, id: "x", every: ptr[int64](999)},
		{name: "every and cron", k: 1, id: "x", every: ptr[int64](1000), cron: "* * * * *", delay: ptr[int64](1000)},
		{name: "count under 1", k: 1, id: "x", every: ptr[int64](1000), count: ptr(-1)},
		{name: "until before the first occurrence", k: 1, id: "x", every: ptr[int64](3_600_000), until: ptr[int64](ts + 60_000)},
		{name: "until before the start", k: 1, id: "x", at: ptr[int64](ts + 10_000), every: ptr[int64](1000), until: ptr[int64](ts + 9_999)},
	}
	for _, tc := range cases {
		tab, err := Parse(DefaultSpec, tc.k)
		if err != nil {
			t.Fatal(err)
		}
		v := seriesVector{Name: tc.name, Spec: DefaultSpec, PerLevel: tc.k, TimestampMs: ts, Topic: "delay-topic", Target: "orders",
			ID: tc.id, DelayMs: tc.delay, AtMs: tc.at, EveryMs: tc.every, Cron: tc.cron, Timezone: tc.zone, UntilMs: tc.until, Count: tc.count,
			Headers: headersOf(tc.own), vKey: keyOf(tc.key)}
		d := Delay{Target: "orders", ID: tc.id, Cron: tc.cron, Timezone: tc.zone}
		if tc.delay != nil {
			d.Delay = time.Duration(*tc.delay) * time.Millisecond
		}
		if tc.at != nil {
			d.At = time.UnixMilli(*tc.at)
		}
		if tc.every != nil {
			d.Every = time.Duration(*tc.every) * time.Millisecond
		}
		if tc.until != nil {
			d.Until = time.UnixMilli(*tc.until)
		}
		if tc.count != nil {
			d.Count = *tc.count
		}
		r := &kgo.Record{Key: tc.key, Timestamp: time.UnixMilli(ts), Headers: append([]kgo.RecordHeader(nil), tc.own...)}
		if err := tab.Stamp(r, v.Topic, d, time.UnixMilli(ts)); err != nil {
			v.Error = true
			f.Vectors = append(f.Vectors, v)
			continue
		}
		s, err := tab.Parse(r.Headers, r.Timestamp)
		if err != nil || s.Recur == nil {
			t.Errorf("%s: stamped series does not parse: %v", tc.name, err)
		} else if l := tab.LevelOf(r.Partition); l != tab.LevelFor(s.Delay) {
			t.Errorf("%s: stamped into level %d, its first delay %s belongs to level %d", tc.name, l, s.Delay, tab.LevelFor(s.Delay))
		}
		v.WantFrom, v.WantTo = tab.Range(tab.LevelOf(r.Partition))
		if tc.key != nil || tab.PerLevel() == 1 {
			v.WantPartition = ptr(r.Partition)
		}
		v.WantHeaders = headersOf(r.Headers)
		f.Vectors = append(f.Vectors, v)
	}
	return f
}

// ------------------------------------------------------------------ stamp

type stampVector struct {
	Name        string    `json:"name"`
	Spec        string    `json:"spec"`
	PerLevel    int       `json:"per_level"`
	TimestampMs int64     `json:"timestamp_ms"`
	Topic       string    `json:"topic"`
	Target      string    `json:"target"`
	DelayMs     *int64    `json:"delay_ms,omitempty"`
	AtMs        *int64    `json:"at_ms,omitempty"`
	Level       *int      `json:"level,omitempty"`
	TargetPart  *int32    `json:"target_partition,omitempty"`
	Headers     []vHeader `json:"headers"`
	vKey
	// Error is true when the record cannot be stamped.
	Error bool `json:"error,omitempty"`
	// WantPartition is null for a null key on a level with several
	// partitions: any partition of [WantFrom, WantTo).
	WantPartition *int32    `json:"want_partition,omitempty"`
	WantFrom      int32     `json:"want_from"`
	WantTo        int32     `json:"want_to"`
	WantHeaders   []vHeader `json:"want_headers,omitempty"`
}

type stampFile struct {
	About   string        `json:"about"`
	Vectors []stampVector `json:"vectors"`
}

func ptr[T any](v T) *T { return &v }

func buildStamp(t *testing.T) stampFile {
	f := stampFile{About: "The producer helper (Go: Table.Stamp; Java: KdelayRecords.delayed; Python: kdelay.delayed): a record with key, timestamp ms and its own headers, stamped for the delay topic with exactly one of delay_ms, at_ms (epoch ms), level, and optionally a target partition -> the delay-topic partition (null: any of [want_from, want_to), null key on a level with several partitions) and the headers in order (the record's own first); error when it cannot be stamped."}
	const ts = 1_764_579_600_000
	type c struct {
		name   string
		spec   string
		k      int
		key    []byte
		own    []kgo.RecordHeader
		target string
		delay  *int64
		at     *int64
		level  *int
		tp     *int32
	}
	def := DefaultSpec
	cases := []c{
		{"delay 90s", def, 1, []byte("order-17"), nil, "orders", ptr[int64](90_000), nil, nil, nil},
		{"delay zero", def, 1, []byte("order-17"), nil, "orders", ptr[int64](0), nil, nil, nil},
		{"no schedule is a zero delay", def, 1, []byte("order-17"), nil, "orders", nil, nil, nil, nil},
		{"delay below level 1", def, 1, nil, nil, "orders", ptr[int64](500), nil, nil, nil},
		{"delay 2h boundary", def, 1, []byte("k"), nil, "orders", ptr[int64](7_200_000), nil, nil, nil},
		{"delay below 2h", def, 1, []byte("k"), nil, "orders", ptr[int64](7_199_999), nil, nil, nil},
		{"delay beyond last level", def, 1, []byte("k"), nil, "orders", ptr[int64](30 * 3_600_000), nil, nil, nil},
		{"delay k=4 keyed", def, 4, []byte("order-17"), nil, "orders", ptr[int64](90_000), nil, nil, nil},
		{"delay k=4 unicode key", def, 4, []byte("ключ-🔑"), nil, "orders", ptr[int64](600_000), nil, nil, nil},
		{"delay k=4 empty key", def, 4, []byte{}, nil, "orders", ptr[int64](600_000), nil, nil, nil},
		{"delay k=4 binary key", def, 4, []byte{0xff, 0x00, 0x80}, nil, "orders", ptr[int64](1000), nil, nil, nil},
		{"delay k=4 null key", def, 4, nil, nil, "orders", ptr[int64](1000), nil, nil, nil},
		{"delay 1d table", def + " 1d", 3, []byte("user:42"), nil, "orders", ptr[int64](86_400_000), nil, nil, nil},
		{"own headers kept first", def, 1, []byte("k"), vhdrs("trace", "abc", "bin", "hex:00ff", "trace", "dup", "empty", ""), "orders", ptr[int64](5000), nil, nil, nil},
		{"at in 90s", def, 1, []byte("order-17"), nil, "orders", nil, ptr[int64](ts + 90_000), nil, nil},
		{"at in the past", def, 2, []byte("order-17"), nil, "orders", nil, ptr[int64](ts - 90_000), nil, nil},
		{"at exactly 30m", def, 3, []byte("a"), nil, "orders", nil, ptr[int64](ts + 1_800_000), nil, nil},
		{"level 3", def, 1, []byte("order-17"), nil, "orders", nil, nil, ptr(3), nil},
		{"level 18 k=2", def, 2, []byte("order-17"), nil, "orders", nil, nil, ptr(18), nil},
		{"level 19 of 1d table", def + " 1d", 5, []byte("abc"), nil, "orders", nil, nil, ptr(19), nil},
		{"target partition", def, 1, []byte("k"), nil, "orders", ptr[int64](1000), nil, nil, ptr[int32](2)},
		{"target partition with level", def, 1, []byte("k"), nil, "orders", nil, nil, ptr(2), ptr[int32](0)},
		// Errors.
		{"bad target", def, 1, nil, nil, "my topic", ptr[int64](1000), nil, nil, nil},
		{"empty target", def, 1, nil, nil, "", ptr[int64](1000), nil, nil, nil},
		{"negative delay", def, 1, nil, nil, "orders", ptr[int64](-1), nil, nil, nil},
		{"level negative", def, 1, nil, nil, "orders", nil, nil, ptr(-1), nil},
		{"level 19 of 18", def, 1, nil, nil, "orders", nil, nil, ptr(19), nil},
		{"negative target partition", def, 1, nil, nil, "orders", ptr[int64](1000), nil, nil, ptr[int32](-1)},
		{"delay and level", def, 1, nil, nil, "orders", ptr[int64](1000), nil, ptr(2), nil},
		{"delay and at", def, 1, nil, nil, "orders", ptr[int64](1000), ptr[int64](ts), nil, nil},
	}
	for _, tc := range cases {
		tab, err := Parse(tc.spec, tc.k)
		if err != nil {
			t.Fatal(err)
		}
		v := stampVector{Name: tc.name, Spec: tc.spec, PerLevel: tc.k, TimestampMs: ts, Topic: "delay-topic",
			Target: tc.target, DelayMs: tc.delay, AtMs: tc.at, Level: tc.level, TargetPart: tc.tp,
			Headers: headersOf(tc.own), vKey: keyOf(tc.key)}
		var d Delay
		d.Target = tc.target
		if tc.delay != nil {
			d.Delay = time.Duration(*tc.delay) * time.Millisecond
		}
		if tc.at != nil {
			d.At = time.UnixMilli(*tc.at)
		}
		if tc.level != nil {
			d.Level = *tc.level
		}
		d.Partition = tc.tp
		r := &kgo.Record{Key: tc.key, Timestamp: time.UnixMilli(ts), Headers: append([]kgo.RecordHeader(nil), tc.own...)}
		if err := tab.Stamp(r, v.Topic, d, time.UnixMilli(ts+12345)); err != nil {
			v.Error = true
			f.Vectors = append(f.Vectors, v)
			continue
		}
		if r.Topic != v.Topic || !r.Timestamp.Equal(time.UnixMilli(ts)) {
			t.Errorf("%s: topic %q timestamp %s", tc.name, r.Topic, r.Timestamp)
		}
		// The stamped record must parse back to the schedule it was given.
		s, err := tab.Parse(r.Headers, r.Timestamp)
		if err != nil {
			t.Errorf("%s: stamped record does not parse: %v", tc.name, err)
		} else if l := tab.LevelOf(r.Partition); l != tab.LevelFor(s.Delay) {
			t.Errorf("%s: stamped into level %d, its delay %s belongs to level %d", tc.name, l, s.Delay, tab.LevelFor(s.Delay))
		}
		level := tab.LevelOf(r.Partition)
		v.WantFrom, v.WantTo = tab.Range(level)
		if tc.key != nil || tab.PerLevel() == 1 {
			v.WantPartition = ptr(r.Partition)
		}
		v.WantHeaders = headersOf(r.Headers)
		f.Vectors = append(f.Vectors, v)
	}
	return f
}

// ---------------------------------------------------------------- rewrite

type forwardVector struct {
	Name        string    `json:"name"`
	Headers     []vHeader `json:"headers"`
	DueMs       int64     `json:"due_ms"`
	Source      string    `json:"source"`
	WantHeaders []vHeader `json:"want_headers"`
}

type deadLetterVector struct {
	Name        string    `json:"name"`
	Headers     []vHeader `json:"headers"`
	Reason      string    `json:"reason"`
	Source      string    `json:"source"`
	WantHeaders []vHeader `json:"want_headers"`
}

type rewriteFile struct {
	About      string             `json:"about"`
	Forward    []forwardVector    `json:"forward"`
	DeadLetter []deadLetterVector `json:"dead_letter"`
}

func buildRewrite(t *testing.T) rewriteFile {
	f := rewriteFile{About: "Header rewrites by the relay. forward: what the target topic receives: the producer's own headers in order (duplicates, empty and binary values kept), every kdelay-* header removed, then kdelay-due-at (epoch ms), kdelay-source (topic/partition/offset) and, when the record has a kdelay-id, kdelay-id (the last one). dead_letter: every original header in order except an earlier kdelay-error or kdelay-source, then kdelay-error (the reason) and kdelay-source."}
	src := Source("delay-topic", 4, 1234567)
	full := vhdrs("trace", "abc", HeaderTarget, "orders", HeaderDelay, "90s", "trace", "dup", "bin", "hex:00ff80", "empty", "", "ключ", "значение 🔑", HeaderTargetPartition, "2")
	for _, tc := range []struct {
		name string
		hs   []kgo.RecordHeader
		due  int64
	}{
		{"control headers removed, own kept in order", full, 1_764_579_690_000},
		{"only control headers", vhdrs(HeaderTarget, "orders", HeaderLevel, "3", HeaderDeliverAt, "1"), 1},
		{"earlier relay headers replaced", vhdrs(HeaderDueAt, "5", "x", "1", HeaderSource, "old/0/1", HeaderError, "bad_delay"), 0},
		{"any kdelay- prefix removed", vhdrs("kdelay-future-thing", "v", "Kdelay-Upper", "kept", "kdelay", "kept too"), 253402214400000},
		{"no headers", nil, 1_764_579_600_000},
		{"kdelay-id kept, the last one, after the source", vhdrs("x", "1", HeaderID, "first", HeaderTarget, "orders", HeaderID, "order-17"), 1_764_579_600_000},
	} {
		f.Forward = append(f.Forward, forwardVector{Name: tc.name, Headers: headersOf(tc.hs), DueMs: tc.due, Source: src,
			WantHeaders: headersOf(ForwardHeaders(tc.hs, time.UnixMilli(tc.due), src))})
	}
	for _, tc := range []struct {
		name   string
		hs     []kgo.RecordHeader
		reason string
	}{
		{"everything kept", full, "bad_delay"},
		{"earlier error and source replaced", vhdrs(HeaderError, "old", "x", "1", HeaderSource, "old/0/1", HeaderTarget, "t"), "missing_target"},
		{"no headers", nil, "no_schedule"},
	} {
		f.DeadLetter = append(f.DeadLetter, deadLetterVector{Name: tc.name, Headers: headersOf(tc.hs), Reason: tc.reason, Source: src,
			WantHeaders: headersOf(DeadLetterHeaders(tc.hs, tc.reason, src))})
	}
	return f
}

// ------------------------------------------------------------------- test

func encodeVectors(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// TestContractVectors regenerates every shared vector from this package and
// fails when a file in testdata/contract differs (or is missing, or an
// extra .json file is there): run with -update after an intended change of
// the contract, then make clients/java and clients/python pass again.
func TestContractVectors(t *testing.T) {
	files := map[string]any{
		"murmur2.json": buildMurmur(t),
		"tables.json":  buildTables(t),
		"parse.json":   buildParse(t),
		"stamp.json":   buildStamp(t),
		"series.json":  buildSeries(t),
		"rewrite.json": buildRewrite(t),
	}
	if *updateVectors {
		if err := os.MkdirAll(contractDir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for name, v := range files {
		got, err := encodeVectors(v)
		if err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(contractDir, name)
		if *updateVectors {
			if err := os.WriteFile(path, got, 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		want, err := os.ReadFile(path)
		if err != nil {
			t.Errorf("%s: %v (regenerate: go test ./levels -run TestContractVectors -update)", path, err)
			continue
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s differs from what the Go contract computes now: %s\n"+
				"If the contract change is intended, regenerate with `go test ./levels -run TestContractVectors -update` "+
				"and update clients/java and clients/python until their tests pass.", path, firstDiff(want, got))
		}
	}
	entries, err := os.ReadDir(contractDir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if _, ok := files[e.Name()]; !ok && strings.HasSuffix(e.Name(), ".json") {
			t.Errorf("%s: not generated by this test (remove it or add it here)", filepath.Join(contractDir, e.Name()))
		}
	}
}

// firstDiff describes the first line where want and got differ.
func firstDiff(want, got []byte) string {
	wl, gl := strings.Split(string(want), "\n"), strings.Split(string(got), "\n")
	for i := 0; i < max(len(wl), len(gl)); i++ {
		var w, g string
		if i < len(wl) {
			w = wl[i]
		}
		if i < len(gl) {
			g = gl[i]
		}
		if w != g {
			return fmt.Sprintf("line %d: file has %q, Go computes %q", i+1, strings.TrimSpace(w), strings.TrimSpace(g))
		}
	}
	return "no line differs (trailing bytes)"
}
