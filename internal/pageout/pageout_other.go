//go:build !linux

package pageout

// Release does nothing where MADV_PAGEOUT is not available.
func Release(string) error { return nil }
