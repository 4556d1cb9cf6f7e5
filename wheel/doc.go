// Package wheel is a file-backed timer wheel: it holds delayed records on
// disk until they are due and hands them out in due order, never early.
//
// # Model
//
// Time is passed in, never read: every method that needs the time takes
// now in unix milliseconds. Add accepts an entry due at most Options.Horizon
// (default 1h) after now; one due in the past comes out on the next Expire.
// Expire(now, max, fn) hands out up to max entries with Due <= now in due
// order, at millisecond precision, ties broken by partition then offset,
// each payload a copy the caller keeps; ExpireView hands out a view of the
// wheel's storage instead, for a caller that copies payloads into buffers
// of its own. NextExpiry tells the caller how long it may sleep; Stage
// lets it do, while it would sleep, the scan Expire does when a tick comes
// due, so that
// a burst's first entry comes out at its due time. A handed-out entry is
// in flight until Done; Done, SetHandled, Trim and Drop are persisted by the
// next Flush, which is a group commit: one write and, by Options.Sync, one
// fsync for everything buffered since the previous Flush.
//
// # Tick and memory
//
// Time is cut into ticks of Options.Tick (default 100ms), and tick t lives
// in slot t mod (Horizon/Tick + 2). Entries are not held in memory: the
// index is the slot array, each slot the head of a chain through the log.
// In memory the wheel keeps per slot only a bound of its pending due times
// (16 bytes), the slot heads of the segment being written (4 bytes each),
// per source partition one bit per offset between its lowest pending offset
// and its highest, and the scanned entries of the one tick being handed out
// (at most 32768 of them; a larger tick is sorted through a spill file and
// merged back). Sealed segments are read through read-only memory maps, and
// the pages read are dropped from the process's resident set every 256
// ticks scanned and every 32 MiB of segment read, so that a burst handed
// out from one scan does not map the whole wheel (madvise MADV_DONTNEED on
// Linux; the page cache keeps them).
// The active segment, whose entries lie scattered, is read with pread (a
// 64 KiB block at a time where its records lie close together: entries
// added in due order, a burst); the records a scan read from it are kept for their
// hand-out (at most 1 MiB).
//
// # Compaction
//
// Entries are appended in the order they are added, so one tick's entries
// lie scattered over every segment. A background goroutine rewrites each
// sealed segment with its entries grouped by slot (same record and index
// format, marks left out); the wheel installs the copy in Flush once both
// checkpoints lie past the segment. A tick then reads one short run of
// records per segment. A segment whose entries already lie grouped (due
// together or dense in due order: at most two runs per slot chain on
// average, four entries or more per chain; or added in due order in
// stretches of 16 entries or more on average, as partitions read in turn)
// is left as it is: its copy would read no better. The goroutine only reads the sealed segment's
// mapping and writes its own file; everything else stays on the caller's
// goroutine.
//
// # Files
//
// A directory holds segments NNNNNNNN.seg (append-only records, 8-byte
// aligned, each with a CRC-32C: entries of 40 bytes plus payload, chained
// per slot inside their segment through a prev offset, and marks for done,
// trim, handled and drop), one NNNNNNNN.idx per sealed segment (its fixed
// slot array of chain heads, with the segment's due and offset ranges),
// checkpoint.0 and checkpoint.1 (written in turn: the slot state, the
// pending-offset bitsets and watermarks as of a log position), and LOCK.
// Every file starts with a magic and a format version; a compacted
// segment's header also holds its exact size. Chains never cross
// segments, so a segment whose entries are all done or dropped is deleted
// on its own; disk use stays near the live entries plus one segment.
//
// Recovery (Open) loads the newest valid checkpoint and replays only the
// log written after it (at most a quarter segment, 16 MiB at most, plus
// what followed it unsynced). The first record failing its checksum ends
// the log; see Open for what is reported. Per source partition the wheel
// persists the highest offset added (Highest), the relay's watermark
// (Handled) and the done offsets, so a clean restart re-reads nothing and
// sends no duplicate.
//
// # Concurrency
//
// A Wheel is not safe for concurrent use: the caller serialises every call.
// The fn passed to Expire or ExpireView may call Done, SetHandled and
// Add, not Expire or ExpireView.
// The compaction goroutine is internal: Close stops it and waits for it.
package wheel
