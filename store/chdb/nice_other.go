//go:build !linux

package chdb

import "errors"

var errNotLinux = errors.New("per-thread priorities need Linux")

// setThreadNice is not available: elsewhere nice values are per process.
func setThreadNice(int) error { return errNotLinux }

// isMainThread is false: nice values are not set per thread here, so no thread needs avoiding.
func isMainThread() bool { return false }

func threadID() int { return 0 }

// threadIDs fails, so the idler moves nothing.
func threadIDs() ([]int, error) { return nil, errNotLinux }

func threadPriority(int) (int, bool, error) { return 0, false, errNotLinux }

func setThreadIdle(int, int) error { return errNotLinux }
