//go:build !linux

package chdb

func withoutLoggingNotice(fn func()) { fn() }
