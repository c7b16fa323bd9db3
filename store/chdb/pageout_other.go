//go:build !linux

package chdb

// releaseLibraryPages does nothing where MADV_PAGEOUT is not available.
func releaseLibraryPages(string) error { return nil }
