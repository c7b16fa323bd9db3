//go:build unix

package chdb

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
)

// checkDataDirLock reports ErrDataDirLocked when another process holds the
// engine's lock on dir. ClickHouse takes flock(LOCK_EX|LOCK_NB) on
// <dir>/status while it runs; when that fails chdb_connect only prints the
// reason on stderr and returns NULL, so look first and return a useful error.
// The probe lock is released at once (a race with another process starting
// right now still ends in chdb_connect's generic failure).
func checkDataDirLock(dir string) error {
	f, err := os.OpenFile(filepath.Join(dir, "status"), os.O_RDWR, 0)
	if err != nil {
		return nil // no status file yet: nobody has run the engine here
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return ErrDataDirLocked
		}
		return nil
	}
	_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
	return nil
}
