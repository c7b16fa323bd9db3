package store

import (
	"bufio"
	"os"
	"strconv"
	"strings"
)

// DefaultMaxMemory is the embedded engine's memory cap unless configured: half of the memory
// this process may use, so that the engine's reads, inserts and merges together can never
// take the process past its container's limit (the engine's own default is 0.9 of the host's
// RAM and ignores cgroups). The other half is the receiver's, the correlator's and the spool's.
func DefaultMaxMemory() int64 {
	return AvailableMemory() / 2
}

// AvailableMemory is the memory this process may use: the cgroup's limit (v2 memory.max, or
// v1 memory.limit_in_bytes) when there is one and it is below the host's RAM, else the
// host's RAM (MemTotal). It returns 4 GiB when neither can be read.
func AvailableMemory() int64 {
	n, _ := MemoryAvailable()
	return n
}

// MemoryAvailable is AvailableMemory, and whether it is the cgroup's limit rather than the
// host's RAM.
func MemoryAvailable() (bytes int64, cgroupLimit bool) {
	return availableMemory([]string{"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"}, "/proc/meminfo")
}

// availableMemory is MemoryAvailable with the files it reads named: the cgroup limit files
// (v2 first) and meminfo.
func availableMemory(cgroupFiles []string, meminfo string) (int64, bool) {
	host := memTotal(meminfo)
	lim := cgroupLimit(cgroupFiles)
	switch {
	case lim > 0 && (host <= 0 || lim < host):
		return lim, true
	case host > 0:
		return host, false
	}
	return 4 << 30, false
}

func cgroupLimit(files []string) int64 {
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		s := strings.TrimSpace(string(b))
		if s == "max" {
			return 0
		}
		if n, err := strconv.ParseInt(s, 10, 64); err == nil && n > 0 && n < 1<<60 {
			return n
		}
	}
	return 0
}

func memTotal(meminfo string) int64 {
	f, err := os.Open(meminfo)
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "MemTotal:"); ok {
			fs := strings.Fields(rest)
			if len(fs) >= 1 {
				if kb, err := strconv.ParseInt(fs[0], 10, 64); err == nil {
					return kb << 10
				}
			}
		}
	}
	return 0
}
