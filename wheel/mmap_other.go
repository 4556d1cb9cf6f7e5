//go:build !(linux || darwin || freebsd || netbsd || openbsd || dragonfly)

package wheel

import (
	"errors"
	"fmt"
	"io"
	"os"
)

// mappedWrites is false here: segments are read into memory and every write
// is copied into that copy too. Portable, but it holds the segments in memory;
// the wheel is meant for the unix systems above.
const mappedWrites = false

func mapFile(f *os.File, length int, _ bool) ([]byte, error) {
	if length <= 0 {
		return nil, nil
	}
	b := make([]byte, length)
	if _, err := f.ReadAt(b, 0); err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("wheel: read %s: %w", f.Name(), err)
	}
	return b, nil
}

func unmapFile([]byte) error { return nil }

func lockDir(*os.File) error { return nil }

func allocWords(n int) []uint32 { return make([]uint32, n) }

func freeWords([]uint32) {}
