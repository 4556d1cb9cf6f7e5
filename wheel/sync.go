package wheel

// SyncManual fsyncs only when the caller asks, with [Wheel.Sync]: Flush
// then writes without an fsync. What was written survives kill -9; what was
// written since the last Sync may be lost to a power loss (never a
// checkpoint ahead of the data: checkpoints follow a Sync). The relay uses
// it at least once, to fsync once per offset commit instead of once per
// batch.
const SyncManual = SyncNone + 1

// Sync is Flush followed by an fsync, whatever the sync policy: once it
// returns, everything buffered before it survives kill -9 and power loss.
func (w *Wheel) Sync() error { return w.checkedFlush(true) }
