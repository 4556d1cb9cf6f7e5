package offsetmap

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

func TestRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		name string
		s    Set
	}{
		{"empty span", Set{Base: 7, End: 7}},
		{"all open", Set{Base: 0, End: 3, Open: []int64{0, 1, 2}}},
		{"base open, rest done", Set{Base: 100, End: 200, Open: []int64{100}}},
		{"scattered", Set{Base: 10, End: 40, Open: []int64{10, 11, 15, 30, 39}}},
		{"all done", Set{Base: 5, End: 13}},
		{"long done run", Set{Base: 1 << 40, End: 1<<40 + 1_000_000, Open: []int64{1 << 40, 1<<40 + 999_999}}},
		{"alternating", Set{Base: 0, End: 64, Open: []int64{0, 2, 4, 6, 8, 10, 12, 14, 16, 63}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			text, err := Encode(tc.s, 4096)
			if err != nil {
				t.Fatal(err)
			}
			got, err := Decode(text, tc.s.Base)
			if err != nil {
				t.Fatalf("Decode(%q): %v", text, err)
			}
			if got.Base != tc.s.Base || got.End != tc.s.End || !slices.Equal(got.Open, tc.s.Open) {
				t.Errorf("round trip: got %+v, want %+v", got, tc.s)
			}
			for o := tc.s.Base - 1; o <= min(tc.s.End, tc.s.Base+100); o++ {
				want := o >= tc.s.Base && o < tc.s.End && !slices.Contains(tc.s.Open, o)
				if got.Done(o) != want {
					t.Errorf("Done(%d) = %v, want %v", o, got.Done(o), want)
				}
			}
			t.Logf("%d offsets, %d open: %d bytes", tc.s.End-tc.s.Base, len(tc.s.Open), len(text))
		})
	}
}

func TestFormChoice(t *testing.T) {
	// Alternating open/done offsets: the bitset is smaller than the runs.
	s := Set{Base: 0, End: 4000}
	for o := int64(0); o < 4000; o += 2 {
		s.Open = append(s.Open, o)
	}
	text, err := Encode(s, 4096)
	if err != nil {
		t.Fatal(err)
	}
	if want := (4000 / 8) * 4 / 3; len(text) > want+16 {
		t.Errorf("alternating set: %d bytes, want about %d (the bitset)", len(text), want)
	}
	// One open offset, a million done: runs, a few bytes.
	text, err = Encode(Set{Base: 0, End: 1_000_000, Open: []int64{0}}, 4096)
	if err != nil || len(text) > 16 {
		t.Errorf("long run: %q, %v; want a few bytes", text, err)
	}
}

func TestTooLarge(t *testing.T) {
	s := Set{Base: 0, End: 100_000}
	for o := int64(0); o < 100_000; o += 3 {
		s.Open = append(s.Open, o)
	}
	if _, err := Encode(s, 4096); !errors.Is(err, ErrTooLarge) {
		t.Errorf("Encode of a scattered 100k span = %v, want ErrTooLarge", err)
	}
	if _, err := Encode(Set{Base: 0, End: 10}, 2); !errors.Is(err, ErrTooLarge) {
		t.Errorf("Encode under a 2-byte limit = %v, want ErrTooLarge", err)
	}
}

func TestEncodeInvalid(t *testing.T) {
	for _, s := range []Set{
		{Base: 5, End: 4},
		{Base: 0, End: 10, Open: []int64{3, 3}},
		{Base: 0, End: 10, Open: []int64{4, 2}},
		{Base: 0, End: 10, Open: []int64{10}},
		{Base: 0, End: MaxSpan + 1},
	} {
		if _, err := Encode(s, 4096); err == nil || errors.Is(err, ErrTooLarge) {
			t.Errorf("Encode(%+v) = %v, want an invalid-set error", s, err)
		}
	}
}

func TestDecodeRefuses(t *testing.T) {
	good, err := Encode(Set{Base: 42, End: 50, Open: []int64{42, 45}}, 4096)
	if err != nil {
		t.Fatal(err)
	}
	for name, text := range map[string]string{
		"other base":  good, // decoded below against base 41
		"not base64":  "!!!",
		"empty":       "",
		"foreign":     "AAAA",
		"truncated":   good[:len(good)-1],
		"trailing":    good + "AA",
		"other text":  strings.Repeat("x", 20),
		"huge span":   "AXKE" + strings.Repeat("_", 8),
		"unknown frm": "AXo",
	} {
		base := int64(42)
		if name == "other base" {
			base = 41
		}
		if s, err := Decode(text, base); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: Decode(%q) = %+v, %v; want ErrMalformed", name, text, s, err)
		}
	}
}

// FuzzDecode: Decode never panics, and what it accepts is a valid set that
// encodes back to a string that decodes to the same set (it never claims an
// offset done that its input did not say was done).
func FuzzDecode(f *testing.F) {
	for _, s := range []Set{{Base: 0, End: 10, Open: []int64{0, 5}}, {Base: 3, End: 3}, {Base: 9, End: 900, Open: []int64{9}}} {
		text, _ := Encode(s, 4096)
		f.Add(text, s.Base)
	}
	f.Add("AXIAAA", int64(0))
	f.Fuzz(func(t *testing.T, text string, base int64) {
		s, err := Decode(text, base)
		if err != nil {
			return
		}
		if verr := s.validate(); verr != nil {
			t.Fatalf("Decode(%q) accepted an invalid set: %v", text, verr)
		}
		again, err := Encode(s, 1<<30)
		if err != nil {
			t.Fatal(err)
		}
		s2, err := Decode(again, base)
		if err != nil || s2.End != s.End || !slices.Equal(s2.Open, s.Open) {
			t.Fatalf("re-encode of %+v: %+v, %v", s, s2, err)
		}
	})
}

// FuzzRoundTrip: decode(encode(s)) == s for sets built from the input.
func FuzzRoundTrip(f *testing.F) {
	f.Add(int64(0), uint16(10), []byte{0, 3})
	f.Add(int64(1<<50), uint16(1000), []byte{5, 1, 1, 200})
	f.Fuzz(func(t *testing.T, base int64, span uint16, gaps []byte) {
		if base < 0 || base > 1<<60 {
			return
		}
		s := Set{Base: base, End: base + int64(span)}
		at := base
		for _, g := range gaps {
			at += int64(g)
			if at >= s.End {
				break
			}
			s.Open = append(s.Open, at)
			at++
		}
		text, err := Encode(s, 1<<30)
		if err != nil {
			t.Fatal(err)
		}
		got, err := Decode(text, base)
		if err != nil {
			t.Fatalf("Decode(Encode(%+v)) = %v", s, err)
		}
		if got.End != s.End || !slices.Equal(got.Open, s.Open) {
			t.Fatalf("got %+v, want %+v", got, s)
		}
	})
}
