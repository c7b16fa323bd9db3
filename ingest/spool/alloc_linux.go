package spool

import (
	"os"

	"golang.org/x/sys/unix"
)

// allocate gives f size bytes of disk space and that size, without writing them: they read as
// zeros.
func allocate(f *os.File, size int64) error {
	return unix.Fallocate(int(f.Fd()), 0, 0, size)
}

// syncData makes f's written data durable, and of its metadata only what reading the data back
// needs. Into space allocated beforehand that is no change of size, so ext4 need not wait for
// its journal to commit whatever else the machine changed (the probe in BENCHMARKS.md: the
// sync's worst case 3-8 times lower than an appended file's fsync under the same load).
func syncData(f *os.File) error {
	return unix.Fdatasync(int(f.Fd()))
}
