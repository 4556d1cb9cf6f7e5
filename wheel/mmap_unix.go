//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package wheel

import (
	"fmt"
	"os"
	"syscall"
	"unsafe"
)

// mappedWrites reports that writes through the file are visible in a
// mapping of it (unified page cache), so a segment is written with WriteAt
// and read through its read-only mapping.
const mappedWrites = true

// mapFile maps length bytes of f read-only. The mapping may extend past the
// end of the file; the wheel never reads beyond what it has written. With
// populate (a sealed segment) the page tables are filled at once where the
// system can, which is much cheaper than a page fault per page later.
func mapFile(f *os.File, length int, populate bool) ([]byte, error) {
	if length <= 0 {
		return nil, nil
	}
	flags := syscall.MAP_SHARED
	if populate {
		flags |= mapPopulate
	}
	b, err := syscall.Mmap(int(f.Fd()), 0, length, syscall.PROT_READ, flags)
	if err != nil {
		return nil, fmt.Errorf("wheel: mmap %s: %w", f.Name(), err)
	}
	return b, nil
}

func unmapFile(b []byte) error {
	if b == nil {
		return nil
	}
	return syscall.Munmap(b)
}

// lockDir takes an exclusive advisory lock on the directory's LOCK file.
func lockDir(f *os.File) error {
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		return fmt.Errorf("wheel: directory in use (lock %s): %w", f.Name(), err)
	}
	return nil
}

// allocWords returns n zeroed words outside the Go heap (an anonymous
// mapping), for the transient arrays of a compaction: freeWords returns them
// to the system at once, where a heap slice would keep the heap (and RSS)
// grown until the runtime scavenges it.
func allocWords(n int) []uint32 {
	if n <= 0 {
		return nil
	}
	b, err := syscall.Mmap(-1, 0, 4*n, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
	if err != nil {
		return make([]uint32, n)
	}
	return unsafe.Slice((*uint32)(unsafe.Pointer(&b[0])), n)
}

func freeWords(w []uint32) {
	if cap(w) == 0 {
		return
	}
	w = w[:cap(w)]
	b := unsafe.Slice((*byte)(unsafe.Pointer(&w[0])), 4*len(w))
	syscall.Munmap(b) // EINVAL for a heap fallback: nothing to do
}
