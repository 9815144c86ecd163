//go:build unix

package benchcmp

import (
	"syscall"
	"time"
)

// processCPU is the CPU time (user and system) this process has used, its
// children (the go command) excluded; ok is false where it is not known.
func processCPU() (d time.Duration, ok bool) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, false
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), true
}
