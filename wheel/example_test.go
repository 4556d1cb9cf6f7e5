package wheel_test

import (
	"fmt"
	"log"
	"os"

	"github.com/kdelay/kdelay/wheel"
)

func Example() {
	dir, _ := os.MkdirTemp("", "wheel-example-")
	defer os.RemoveAll(dir)

	now := int64(1_700_000_000_000) // the caller's clock, unix ms
	w, rep, err := wheel.Open(dir, wheel.Options{}, now)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("recovered:", rep.Recovered)

	// The relay adds records whose level time has passed but whose due
	// time has not, then flushes once per batch (group commit).
	w.Add(now, wheel.Entry{Due: now + 1500, Partition: 3, Offset: 41, Payload: []byte("b")})
	w.Add(now, wheel.Entry{Due: now + 900, Partition: 3, Offset: 42, Payload: []byte("a")})
	w.SetHandled(3, 42)
	if err := w.Flush(); err != nil {
		log.Fatal(err)
	}

	next, _ := w.NextExpiry()
	fmt.Println("sleep for", next-now, "ms")

	now += 2000
	w.Expire(now, 100, func(e wheel.Entry) {
		fmt.Printf("forward %d/%d %s\n", e.Partition, e.Offset, e.Payload)
		w.Done(e.Partition, e.Offset) // once the target acknowledged it
	})
	w.Flush()
	lowest, ok := w.LowestPending(3)
	fmt.Println("pending:", w.Pending(), lowest, ok, "handled:", w.Handled(3))
	w.Close()
	// Output:
	// recovered: 0
	// sleep for 900 ms
	// forward 3/42 a
	// forward 3/41 b
	// pending: 0 0 false handled: 42
}
