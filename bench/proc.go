package bench

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// clockTicks is USER_HZ, the unit of /proc/<pid>/stat's times: 100 on every Linux
// architecture Go supports (the kernel fixes it for user space; sysconf would need cgo).
const clockTicks = 100

// procUsage is what the kernel counts for one process.
type procUsage struct {
	cpuSeconds float64 // user + system, all threads, since the process started
	rss, hwm   int64   // resident set now, and its peak (VmHWM), bytes
	rssAnon    int64   // of rss, the anonymous pages (RssAnon): the heaps, not mapped files
}

// statCPU returns the user and system CPU seconds of a /proc/<pid>/stat or
// /proc/<pid>/task/<tid>/stat.
func statCPU(stat []byte) (float64, error) {
	// The command name, in parentheses, may hold spaces: fields count from after it.
	s := string(stat)
	fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(fields) < 13 {
		return 0, fmt.Errorf("%d fields", len(fields))
	}
	// utime and stime are fields 14 and 15 of stat(5), 12 and 13 after the name and state.
	ut, err1 := strconv.ParseInt(fields[11], 10, 64)
	st, err2 := strconv.ParseInt(fields[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("utime %q, stime %q", fields[11], fields[12])
	}
	return float64(ut+st) / clockTicks, nil
}

func readProc(pid int) (procUsage, error) {
	var u procUsage
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return u, fmt.Errorf("read the server's CPU time: %w", err)
	}
	if u.cpuSeconds, err = statCPU(stat); err != nil {
		return u, fmt.Errorf("read the server's CPU time: /proc/%d/stat: %w", pid, err)
	}
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return u, fmt.Errorf("read the server's memory: %w", err)
	}
	for l := range strings.Lines(string(status)) {
		k, v, ok := strings.Cut(l, ":")
		if !ok {
			continue
		}
		var dst *int64
		switch k {
		case "VmRSS":
			dst = &u.rss
		case "VmHWM":
			dst = &u.hwm
		case "RssAnon":
			dst = &u.rssAnon
		default:
			continue
		}
		kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
		if err != nil {
			return u, fmt.Errorf("read the server's memory: %s: %q", k, v)
		}
		*dst = kb << 10
	}
	return u, nil
}

// dirSize is the bytes of the regular files under dir (0 when it does not exist).
func dirSize(dir string) int64 {
	var n int64
	filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			if fi, err := d.Info(); err == nil {
				n += fi.Size()
			}
		}
		return nil
	})
	return n
}

// Groups of the server's threads, by the name the kernel keeps for each (comm).
const (
	// ThreadsProcess are the threads named as the process: Go's, which also run the engine's
	// work they call (an insert's parsing and the statement's own pipeline, every query).
	ThreadsProcess = "process"
	// ThreadsMerges are the engine's merge threads (MergeMutate).
	ThreadsMerges = "engine_merges"
	// ThreadsEngine are the engine's other threads: the pools that run inserts' and queries'
	// pipelines (ThreadPool, RuntimeData), its schedulers and its logger.
	ThreadsEngine = "engine_other"
)

// threadCPU returns the CPU seconds of pid's live threads by group (ThreadsProcess,
// ThreadsMerges, ThreadsEngine). A thread that ended is in the process's total only.
func threadCPU(pid int) (map[string]float64, error) {
	self, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
	if err != nil {
		return nil, fmt.Errorf("read the server's threads: %w", err)
	}
	name := strings.TrimSpace(string(self))
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		return nil, fmt.Errorf("read the server's threads: %w", err)
	}
	out := map[string]float64{}
	for _, t := range tasks {
		dir := fmt.Sprintf("/proc/%d/task/%s/", pid, t.Name())
		comm, err1 := os.ReadFile(dir + "comm")
		stat, err2 := os.ReadFile(dir + "stat")
		if err1 != nil || err2 != nil {
			continue // the thread ended meanwhile
		}
		cpu, err := statCPU(stat)
		if err != nil {
			continue
		}
		group := ThreadsEngine
		switch c := strings.TrimSpace(string(comm)); {
		case c == name:
			group = ThreadsProcess
		case c == "MergeMutate":
			group = ThreadsMerges
		}
		out[group] += cpu
	}
	return out, nil
}
