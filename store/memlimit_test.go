package store

import (
	"os"
	"path/filepath"
	"testing"
)

// TestAvailableMemoryTakesTheCgroupLimit: the engine's default memory cap comes from the
// container's limit when there is one below the host's RAM (cgroup v2 or v1), else the host's.
func TestAvailableMemoryTakesTheCgroupLimit(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	meminfo := write("meminfo", "MemTotal:       16384000 kB\nMemFree:          100000 kB\n")
	host := int64(16384000) << 10
	missing := filepath.Join(dir, "missing")
	for _, c := range []struct {
		name    string
		v2, v1  string // file contents; "" for no file
		meminfo string
		want    int64
		limit   bool // want is the cgroup's limit
	}{
		{"v2 limit", "2147483648\n", "", meminfo, 2 << 30, true},
		{"v2 without a limit", "max\n", "", meminfo, host, false},
		{"v1 limit", "", "1073741824\n", meminfo, 1 << 30, true},
		{"v1 without a limit (its huge number)", "", "9223372036854771712\n", meminfo, host, false},
		{"a limit above the host's RAM", "68719476736\n", "", meminfo, host, false},
		{"no cgroup files", "", "", meminfo, host, false},
		{"no cgroup limit and no meminfo", "", "", missing, 4 << 30, false},
		{"a cgroup limit and no meminfo", "3221225472\n", "", missing, 3 << 30, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			files := []string{missing, missing}
			if c.v2 != "" {
				files[0] = write("v2-"+c.name, c.v2)
			}
			if c.v1 != "" {
				files[1] = write("v1-"+c.name, c.v1)
			}
			if got, limit := availableMemory(files, c.meminfo); got != c.want || limit != c.limit {
				t.Fatalf("availableMemory = %d, %v; want %d, %v", got, limit, c.want, c.limit)
			}
		})
	}
}
