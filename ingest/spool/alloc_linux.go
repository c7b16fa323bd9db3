package spool

import (
	"os"

	"golang.org/x/sys/unix"
)

// allocate gives f size bytes of disk space and that size, without writing them: they read as
// zeros (ext4 marks them unwritten until they are; see Spool.writeZeros).
func allocate(f *os.File, size int64) error {
	return unix.Fallocate(int(f.Fd()), 0, 0, size)
}

// syncData makes f's written data durable, and of its metadata only what reading the data back
// needs. Over space written beforehand that is nothing, so ext4 need not wait for its journal
// to commit whatever else the machine changed.
func syncData(f *os.File) error {
	return unix.Fdatasync(int(f.Fd()))
}
