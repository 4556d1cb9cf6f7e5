// Package offsetmap encodes which offsets of a partition are already done
// above its committed offset, so that the next owner of the partition (a
// restarted relay, one that lost its data directory, another group member)
// skips them instead of delivering them again.
//
// The committed offset is the lowest offset not yet done; offsets above it
// may be done too (forwarded while a lower record waits in the wheel or for
// a retry). A [Set] says which: every offset in [Base, End) is done except
// the Open ones. [Encode] writes it in one of two forms, whichever is
// shorter, as in Confluent's parallel-consumer offset map codec: runs
// (alternating lengths of open and done offsets, as uvarints) or a bitset
// (one bit per offset, 1 = done), behind a version byte, in unpadded
// base64url so that it can stand in a commit's metadata string (Kafka
// bounds it with offset.metadata.max.bytes, 4096 by default).
//
// [Decode] never trusts what it cannot check: a string of another version,
// a bad form, lengths that do not add up, trailing bytes, or a base other
// than the committed offset it is given all fail with an error wrapping
// [ErrMalformed]; the caller then re-reads those offsets (duplicates, never
// loss).
package offsetmap

import (
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
)

// MaxSpan bounds End - Base: a larger span is refused by Encode and Decode
// (it could not fit the metadata limit in either form unless nearly every
// offset is done, and a decoder must not allocate without bound).
const MaxSpan = 1 << 22

var (
	// ErrTooLarge is returned by Encode when the text would exceed its
	// limit.
	ErrTooLarge = errors.New("offsetmap: done set too large for the limit")
	// ErrMalformed is wrapped by every Decode error.
	ErrMalformed = errors.New("offsetmap: malformed done set")
)

const (
	version   = 1
	formRuns  = 'r'
	formBits  = 'b'
	headerLen = 2 // version, form
)

// Set is what is known of a partition above its committed offset: every
// offset in [Base, End) is done, except the ones in Open (sorted, unique,
// each in [Base, End)). Offsets at or above End are unknown (not done).
type Set struct {
	Base int64
	End  int64
	Open []int64
}

// Done reports whether off is known to be done.
func (s Set) Done(off int64) bool {
	if off < s.Base || off >= s.End {
		return false
	}
	_, open := slices.BinarySearch(s.Open, off)
	return !open
}

// validate checks the invariants of s.
func (s Set) validate() error {
	if s.End < s.Base || s.End-s.Base > MaxSpan {
		return fmt.Errorf("span [%d, %d) out of bounds", s.Base, s.End)
	}
	for i, o := range s.Open {
		if o < s.Base || o >= s.End || (i > 0 && o <= s.Open[i-1]) {
			return fmt.Errorf("open offset %d out of order or out of [%d, %d)", o, s.Base, s.End)
		}
	}
	return nil
}

// Encode returns the text form of s, at most limit bytes long, or
// ErrTooLarge.
func Encode(s Set, limit int) (string, error) {
	if err := s.validate(); err != nil {
		return "", fmt.Errorf("offsetmap: encode: %w", err)
	}
	runs := appendRuns(header(formRuns, s), s)
	bits := appendBits(header(formBits, s), s)
	b := runs
	if len(bits) < len(runs) {
		b = bits
	}
	if base64.RawURLEncoding.EncodedLen(len(b)) > limit {
		return "", ErrTooLarge
	}
	return base64.RawURLEncoding.EncodeToString(b), nil
}

func header(form byte, s Set) []byte {
	b := []byte{version, form}
	b = binary.AppendVarint(b, s.Base)
	return binary.AppendUvarint(b, uint64(s.End-s.Base))
}

// appendRuns writes alternating run lengths, starting with open offsets:
// open, done, open, done, ... covering [Base, End); a run may be empty.
func appendRuns(b []byte, s Set) []byte {
	at, i := s.Base, 0
	for at < s.End {
		j := i
		for j < len(s.Open) && s.Open[j] == at+int64(j-i) {
			j++
		}
		b = binary.AppendUvarint(b, uint64(j-i))
		at, i = at+int64(j-i), j
		next := s.End
		if i < len(s.Open) {
			next = s.Open[i]
		}
		b = binary.AppendUvarint(b, uint64(next-at))
		at = next
	}
	return b
}

func appendBits(b []byte, s Set) []byte {
	n := s.End - s.Base
	bits := make([]byte, (n+7)/8)
	for i := range bits {
		bits[i] = 0xff
	}
	if n%8 != 0 {
		bits[len(bits)-1] = byte(1<<(n%8)) - 1
	}
	for _, o := range s.Open {
		i := o - s.Base
		bits[i/8] &^= 1 << (i % 8)
	}
	return append(b, bits...)
}

// Decode parses text as written by Encode for a partition whose committed
// offset is base.
func Decode(text string, base int64) (Set, error) {
	fail := func(format string, args ...any) (Set, error) {
		return Set{}, fmt.Errorf("%w: %s", ErrMalformed, fmt.Sprintf(format, args...))
	}
	b, err := base64.RawURLEncoding.DecodeString(text)
	if err != nil {
		return fail("not base64url: %v", err)
	}
	if len(b) < headerLen || b[0] != version {
		return fail("unknown version")
	}
	form := b[1]
	b = b[headerLen:]
	gotBase, n := binary.Varint(b)
	if n <= 0 {
		return fail("bad base")
	}
	b = b[n:]
	if gotBase != base {
		return fail("base %d, committed offset %d", gotBase, base)
	}
	span, n := binary.Uvarint(b)
	if n <= 0 || span > MaxSpan {
		return fail("bad span")
	}
	b = b[n:]
	s := Set{Base: base, End: base + int64(span)}
	switch form {
	case formRuns:
		at, open := base, true
		for len(b) > 0 {
			l, n := binary.Uvarint(b)
			if n <= 0 || l > uint64(s.End-at) {
				return fail("bad run")
			}
			b = b[n:]
			if open {
				for o := at; o < at+int64(l); o++ {
					s.Open = append(s.Open, o)
				}
			}
			at += int64(l)
			open = !open
		}
		if at != s.End {
			return fail("runs cover %d of %d offsets", at-base, span)
		}
	case formBits:
		if uint64(len(b)) != (span+7)/8 {
			return fail("bitset of %d bytes for %d offsets", len(b), span)
		}
		for i := range int64(span) {
			if b[i/8]&(1<<(i%8)) == 0 {
				s.Open = append(s.Open, base+i)
			}
		}
		if span%8 != 0 && b[len(b)-1]>>(span%8) != 0 {
			return fail("bits set past the span")
		}
	default:
		return fail("unknown form %q", form)
	}
	return s, nil
}
