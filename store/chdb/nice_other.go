//go:build !linux

package chdb

import "errors"

// setThreadNice is not available: elsewhere nice values are per process.
func setThreadNice(int) error { return errors.New("per-thread nice values need Linux") }

// isMainThread is false: nice values are not set per thread here, so no thread needs avoiding.
func isMainThread() bool { return false }
