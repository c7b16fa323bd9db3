//go:build !unix

package chdb

// checkDataDirLock is a no-op where flock is unavailable: chdb_connect still
// refuses a locked directory, with a less specific error.
func checkDataDirLock(string) error { return nil }
