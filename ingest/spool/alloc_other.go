//go:build !linux

package spool

import (
	"errors"
	"os"
)

// allocate is not done where there is no fallocate: segments grow as they are written.
func allocate(*os.File, int64) error { return errors.ErrUnsupported }

func syncData(f *os.File) error { return f.Sync() }
