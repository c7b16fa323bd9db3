package chdb

import (
	"fmt"
	"os"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"
)

// setThreadNice sets the calling thread's nice value: on Linux each thread has its own.
func setThreadNice(nice int) error {
	return syscall.Setpriority(syscall.PRIO_PROCESS, syscall.Gettid(), nice)
}

// isMainThread reports whether the calling thread is the process's first.
func isMainThread() bool { return syscall.Gettid() == syscall.Getpid() }

// threadID is the calling thread's id.
func threadID() int { return syscall.Gettid() }

// threadIDs lists the ids of the process's threads.
func threadIDs() ([]int, error) {
	dir, err := os.Open("/proc/self/task")
	if err != nil {
		return nil, err
	}
	defer dir.Close()
	names, err := dir.Readdirnames(-1)
	if err != nil {
		return nil, fmt.Errorf("list threads: %w", err)
	}
	tids := make([]int, 0, len(names))
	for _, n := range names {
		if tid, err := strconv.Atoi(n); err == nil {
			tids = append(tids, tid)
		}
	}
	return tids, nil
}

// threadPriority reads thread tid's nice value and whether it has the normal policy
// (SCHED_OTHER).
func threadPriority(tid int) (nice int, normal bool, err error) {
	a, err := unix.SchedGetAttr(tid, 0)
	if err != nil {
		return 0, false, err
	}
	return int(a.Nice), a.Policy == unix.SCHED_NORMAL, nil
}

// setThreadIdle moves thread tid to SCHED_IDLE. Its nice value goes with the call, since the
// kernel sets it from the same attributes; it is kept, as an unprivileged process may not
// lower it.
func setThreadIdle(tid, nice int) error {
	return unix.SchedSetAttr(tid, &unix.SchedAttr{Size: unix.SizeofSchedAttr, Policy: unix.SCHED_IDLE, Nice: int32(nice)}, 0)
}
