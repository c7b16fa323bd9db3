package chdb

import "syscall"

// setThreadNice sets the calling thread's nice value: on Linux each thread has its own.
func setThreadNice(nice int) error {
	return syscall.Setpriority(syscall.PRIO_PROCESS, syscall.Gettid(), nice)
}

// isMainThread reports whether the calling thread is the process's first.
func isMainThread() bool { return syscall.Gettid() == syscall.Getpid() }
