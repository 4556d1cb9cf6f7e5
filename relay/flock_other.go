//go:build !unix

package relay

import (
	"errors"
	"os"
)

// flockExclusive: kdelay runs on Unix (Linux, macOS); elsewhere a relay
// refuses to start rather than run without its data-directory lock.
func flockExclusive(*os.File) (bool, error) {
	return false, errors.New("data-directory lock not supported on this platform")
}
