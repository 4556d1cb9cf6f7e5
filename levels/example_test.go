package levels_test

import (
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kdelay/kdelay/levels"
)

// A Go producer stamps a record with its schedule and sends it through a
// client built with kgo.RecordPartitioner(kgo.ManualPartitioner()).
func ExampleTable_Stamp() {
	tab := levels.Default()
	r := &kgo.Record{Key: []byte("order-17"), Value: []byte(`{"id":17}`)}
	now := time.UnixMilli(1_700_000_000_000)
	if err := tab.Stamp(r, "delay-topic", levels.Delay{Target: "orders", Delay: 90 * time.Second}, now); err != nil {
		panic(err)
	}
	fmt.Println(r.Topic, r.Partition)
	for _, h := range r.Headers {
		fmt.Printf("%s=%s\n", h.Key, h.Value)
	}
	// Output:
	// delay-topic 4
	// kdelay-target=orders
	// kdelay-delay=90000
}
