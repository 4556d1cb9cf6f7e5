//go:build unix

package relay

import (
	"errors"
	"os"
	"syscall"
)

// flockExclusive takes f's exclusive flock without waiting; false when
// another open file description holds it.
func flockExclusive(f *os.File) (bool, error) {
	err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
	if errors.Is(err, syscall.EWOULDBLOCK) {
		return false, nil
	}
	return err == nil, err
}
