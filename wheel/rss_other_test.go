//go:build !linux

package wheel

import (
	"testing"
	"time"
)

func reportRSS(*testing.B, string) {}

func cpuTime() time.Duration { return 0 }

func pageFaults() int64 { return 0 }
