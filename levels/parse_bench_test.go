package levels

import (
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// BenchmarkParse is the cost of reading a record's schedule: a target and a
// deliver-at header, as on the wheel path (Parse runs when the record is
// read and again when it fires). Run: go test -run '^$' -bench BenchmarkParse ./levels/
func BenchmarkParse(b *testing.B) {
	t, err := Parse("1s 2s 4s 8s", 1)
	if err != nil {
		b.Fatal(err)
	}
	hs := []kgo.RecordHeader{{Key: HeaderTarget, Value: []byte("orders")}, {Key: HeaderDeliverAt, Value: []byte("1003500")}, {Key: HeaderID, Value: []byte("order-123")}}
	ts := time.UnixMilli(1_000_000)
	b.ReportAllocs()
	for b.Loop() {
		s, err := t.Parse(hs, ts)
		if err != nil || s.Target != "orders" || s.Due.UnixMilli() != 1_003_500 {
			b.Fatalf("Parse: %+v, %v", s, err)
		}
	}
}
