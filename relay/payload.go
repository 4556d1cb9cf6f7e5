package relay

import (
	"encoding/binary"
	"errors"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kdelay/kdelay/levels"
)

// errPayload is returned for a wheel payload that does not decode; the
// wheel checksums entries, so this means a bug or a foreign file.
var errPayload = errors.New("relay: corrupt wheel payload")

// encodePayload packs what the wheel must keep of a delay-topic record to
// forward it later without Kafka: the record's timestamp, key, value and
// original headers (the forward rewrite happens when it fires). Layout,
// lengths as uvarints, a nil key or value as length 0 plus a flag bit:
//
//	flags(1) timestamp-ms(varint) [key-len key] [value-len value]
//	header-count { key-len key value-len value }
func encodePayload(dst []byte, r *kgo.Record) []byte {
	var flags byte
	if r.Key != nil {
		flags |= 1
	}
	if r.Value != nil {
		flags |= 2
	}
	dst = append(dst, flags)
	dst = binary.AppendVarint(dst, r.Timestamp.UnixMilli())
	dst = appendBytes(dst, r.Key)
	dst = appendBytes(dst, r.Value)
	dst = binary.AppendUvarint(dst, uint64(len(r.Headers)))
	for _, h := range r.Headers {
		dst = appendBytes(dst, []byte(h.Key))
		dst = appendBytes(dst, h.Value)
	}
	return dst
}

func appendBytes(dst, b []byte) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(b)))
	return append(dst, b...)
}

// decodePayload is the inverse of encodePayload. The returned record's
// slices alias p.
func decodePayload(p []byte) (*kgo.Record, error) {
	r := new(kgo.Record)
	if err := decodePayloadInto(r, nil, p); err != nil {
		return nil, err
	}
	return r, nil
}

// decodePayloadInto is decodePayload into *r (overwritten), its headers
// appended to hs[:0] (a new slice when they do not fit).
func decodePayloadInto(r *kgo.Record, hs []kgo.RecordHeader, p []byte) error {
	if len(p) < 1 {
		return errPayload
	}
	flags := p[0]
	p = p[1:]
	ts, n := binary.Varint(p)
	if n <= 0 {
		return errPayload
	}
	p = p[n:]
	*r = kgo.Record{Timestamp: time.UnixMilli(ts)}
	var ok bool
	if r.Key, p, ok = takeBytes(p); !ok {
		return errPayload
	}
	if r.Value, p, ok = takeBytes(p); !ok {
		return errPayload
	}
	if flags&1 == 0 {
		r.Key = nil
	}
	if flags&2 == 0 {
		r.Value = nil
	}
	count, n := binary.Uvarint(p)
	if n <= 0 || count > uint64(len(p)) {
		return errPayload
	}
	p = p[n:]
	if count > uint64(cap(hs)) {
		hs = make([]kgo.RecordHeader, 0, count)
	}
	if count > 0 {
		r.Headers = hs[:0]
	}
	for range count {
		var k, v []byte
		if k, p, ok = takeBytes(p); !ok {
			return errPayload
		}
		if v, p, ok = takeBytes(p); !ok {
			return errPayload
		}
		r.Headers = append(r.Headers, kgo.RecordHeader{Key: headerKey(k), Value: v})
	}
	if len(p) != 0 {
		return errPayload
	}
	return nil
}

// headerKey returns k as a string, without allocating for kdelay's own
// header keys (every wheel entry carries two or three of them).
func headerKey(k []byte) string {
	switch string(k) {
	case levels.HeaderTarget:
		return levels.HeaderTarget
	case levels.HeaderDelay:
		return levels.HeaderDelay
	case levels.HeaderDeliverAt:
		return levels.HeaderDeliverAt
	case levels.HeaderLevel:
		return levels.HeaderLevel
	case levels.HeaderTargetPartition:
		return levels.HeaderTargetPartition
	case levels.HeaderID:
		return levels.HeaderID
	case levels.HeaderOriginalTimestamp:
		return levels.HeaderOriginalTimestamp
	}
	return string(k)
}

func takeBytes(p []byte) (b, rest []byte, ok bool) {
	l, n := binary.Uvarint(p)
	if n <= 0 || l > uint64(len(p)-n) {
		return nil, nil, false
	}
	p = p[n:]
	return p[:l:l], p[l:], true
}
