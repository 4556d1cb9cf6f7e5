package wheel

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

// fuzzTemplate builds a wheel directory with sealed segments and indexes,
// both checkpoints, marks of every kind and an unsynced tail left by a
// crash; with compact, the sealed segments are compacted first.
func fuzzTemplate(f *testing.F, compact bool) string {
	dir := f.TempDir()
	opt := Options{SegmentBytes: 4 << 10, Horizon: 10 * time.Second, Tick: 50 * time.Millisecond}
	w, _, err := Open(dir, opt, t0)
	if err != nil {
		f.Fatal(err)
	}
	for i := range int64(300) {
		p := int32(i % 3)
		// due times out of order (7919 is prime): segments to compact
		if err := w.Add(t0, Entry{Due: t0 + (i*7919)%10_000, Partition: p, Offset: i, Payload: payloadOf(p, i)}); err != nil {
			f.Fatal(err)
		}
	}
	w.SetHandled(0, 290)
	w.Close()
	w, _, err = Open(dir, opt, t0)
	if err != nil {
		f.Fatal(err)
	}
	w.Expire(t0+3000, 50, func(e Entry) { w.Done(e.Partition, e.Offset) })
	w.Trim(1, 100)
	w.Drop(2)
	w.Flush()
	if compact {
		if err := settle(w); err != nil {
			f.Fatal(err)
		}
		if w.compacted == 0 {
			f.Fatal("nothing compacted")
		}
	}
	for i := int64(300); i < 340; i++ {
		w.Add(t0, Entry{Due: t0 + 5000, Partition: 0, Offset: i, Payload: payloadOf(0, i)})
	}
	w.SetHandled(0, 339)
	w.writeBuffered() // written, never flushed
	crash(w)
	return dir
}

func copyDir(t *testing.T, from, to string) []string {
	t.Helper()
	ents, err := os.ReadDir(from)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		if e.Name() == "LOCK" {
			continue
		}
		b, err := os.ReadFile(filepath.Join(from, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(to, e.Name()), b, 0o644); err != nil {
			t.Fatal(err)
		}
		names = append(names, e.Name())
	}
	slices.Sort(names)
	return names
}

// FuzzRecover truncates files and flips bytes in a wheel directory; Open
// must neither panic nor fail, and the wheel must then work.
func FuzzRecover(f *testing.F) { fuzzRecover(f, fuzzTemplate(f, false)) }

// FuzzRecoverCompacted is FuzzRecover on a directory whose sealed segments
// are compacted (compact.go).
func FuzzRecoverCompacted(f *testing.F) { fuzzRecover(f, fuzzTemplate(f, true)) }

func fuzzRecover(f *testing.F, tmpl string) {
	// each mutation is 6 bytes: file, op, position (2), value (2)
	f.Add([]byte{})
	f.Add([]byte{0, 0, 0x80, 0, 0, 0})       // truncate the first file in the middle
	f.Add([]byte{1, 1, 0x00, 0x30, 0xff, 0}) // flip a byte near the start of the second
	f.Add([]byte{2, 0, 0xff, 0xf0, 0, 0})    // cut the tail of the third
	f.Add([]byte{3, 1, 0x40, 0, 1, 0, 4, 1, 0x40, 0, 1, 0})
	f.Add([]byte{5, 2, 0x10, 0, 0x55, 0x55}) // overwrite 8 bytes
	f.Add([]byte{6, 0, 0, 0, 0, 0})          // empty a file
	f.Add([]byte{7, 1, 0x7f, 0xff, 0x80, 0, 8, 0, 0x20, 0, 0, 0, 9, 1, 0, 0x10, 3, 0})
	f.Fuzz(func(t *testing.T, muts []byte) {
		dir := t.TempDir()
		names := copyDir(t, tmpl, dir)
		for len(muts) >= 6 {
			m := muts[:6]
			muts = muts[6:]
			path := filepath.Join(dir, names[int(m[0])%len(names)])
			b, err := os.ReadFile(path)
			if err != nil {
				continue
			}
			pos := 0
			if len(b) > 0 {
				pos = int(binary.BigEndian.Uint16(m[2:])) * len(b) / 65536
			}
			switch m[1] % 3 {
			case 0:
				b = b[:pos]
			case 1:
				if len(b) > 0 {
					b[pos] ^= m[4] | 1
				}
			case 2:
				for i := 0; i < 8 && pos+i < len(b); i++ {
					b[pos+i] = m[4+i%2]
				}
			}
			os.WriteFile(path, b, 0o644)
		}
		opt := Options{SegmentBytes: 4 << 10, Horizon: 10 * time.Second, Tick: 50 * time.Millisecond}
		w, rep, err := Open(dir, opt, t0)
		if err != nil {
			t.Fatalf("Open: %v", err)
		}
		var got []Entry
		for {
			n, err := w.Expire(t0+20_000, 100, func(e Entry) { got = append(got, e) })
			if err != nil {
				t.Fatalf("Expire: %v", err)
			}
			if n == 0 {
				break
			}
		}
		for i := 1; i < len(got); i++ {
			if cmpEntry(got[i-1], got[i]) >= 0 {
				t.Fatalf("out of order: %+v then %+v", got[i-1], got[i])
			}
		}
		if len(w.Problems()) == 0 && int64(len(got)) != rep.Recovered {
			t.Fatalf("recovered %d, read %d, no problem reported; report %+v; files %v", rep.Recovered, len(got), rep, names)
		}
		for _, e := range got[:len(got)/2] {
			w.Done(e.Partition, e.Offset)
		}
		w.Add(t0, Entry{Due: t0 + 100, Partition: 5, Offset: 1, Payload: []byte("after")})
		if err := w.Close(); err != nil {
			t.Fatalf("Close: %v", err)
		}
		w, rep, err = Open(dir, opt, t0)
		if err != nil {
			t.Fatalf("second Open: %v", err)
		}
		if rep.Lost != 0 || rep.Truncated != 0 {
			t.Fatalf("second Open after a clean Close: %+v", rep)
		}
		if err := w.Close(); err != nil {
			t.Fatalf("second Close: %v", err)
		}
	})
}
