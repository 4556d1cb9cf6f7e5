package relay

import "github.com/kdelay/kdelay/wheel"

// Store is what the relay needs of its local timer store: the methods of
// [wheel.Wheel] it calls (see the wheel package for each one's contract).
// The relay treats it as a cache: any error but [wheel.ErrInvalid] makes
// it discard the store and re-read its partitions from Kafka (wheel.go).
type Store interface {
	Add(now int64, e wheel.Entry) error
	ExpireView(now int64, max int, fn func(wheel.Entry)) (int, error)
	NextExpiry() (int64, bool)
	Stage(now, lead int64, budget int) (bool, error)
	Done(partition int32, offset int64) error
	SetHandled(partition int32, offset int64)
	Handled(partition int32) int64
	LowestPending(partition int32) (int64, bool)
	Holds(partition int32, offset int64) bool
	EachPending(partition int32, lo, hi int64, fn func(offset int64) bool)
	Highest(partition int32) (int64, bool)
	Pending() int64
	Trim(partition int32, below int64) error
	Drop(partition int32) error
	Flush() error
	Sync() error
	SyncStart() (Syncer, error)
	Close() error
	// Corrupt counts the records found damaged since Open (bit rot);
	// entries behind one are not handed out.
	Corrupt() int64
	// Compacted counts the compactions installed since Open and the
	// entries they copied ([wheel.Wheel.Compacted]).
	Compacted() (segments int, entries int64)
}

// Syncer is the fsync half of Store.SyncStart: once its Sync returns nil,
// everything written before the SyncStart survives a power loss
// ([wheel.Syncer]).
type Syncer interface {
	Sync() error
}

// WheelStore is w as a Store: the relay's default (Options.OpenWheel).
func WheelStore(w *wheel.Wheel) Store { return wheelStore{w} }

type wheelStore struct{ *wheel.Wheel }

func (s wheelStore) SyncStart() (Syncer, error) {
	sy, err := s.Wheel.SyncStart()
	if err != nil {
		return nil, err // not a nil *wheel.Syncer in a non-nil Syncer
	}
	return sy, nil
}
