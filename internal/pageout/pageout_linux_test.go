package pageout

import (
	"bufio"
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// Release pages out the read-only mappings of this test's own binary (a fresh file no other
// process maps): what is resident of them falls, the writable ones are left, and the code keeps
// running, faulting back what it runs.
func TestReleasePagesOutTheExecutable(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	if exe, err = filepath.EvalSymlinks(exe); err != nil {
		t.Fatal(err)
	}
	before := residentOf(t, exe)
	if before.readOnly == 0 {
		t.Fatalf("nothing of %s resident before the release", exe)
	}
	if err := Release(exe); err != nil {
		t.Fatal(err)
	}
	after := residentOf(t, exe)
	t.Logf("read-only mappings of the test binary resident: %d kB before, %d kB after; writable %d, %d kB", before.readOnly, after.readOnly, before.writable, after.writable)
	if after.readOnly*2 > before.readOnly {
		t.Errorf("%d kB of the binary's read-only mappings resident after Release, %d kB before: want under half", after.readOnly, before.readOnly)
	}
	if after.writable < before.writable {
		t.Errorf("the writable mappings went from %d to %d kB: Release must leave them", before.writable, after.writable)
	}
}

// A page faulted back after Release comes alone: the kernel neither reads its neighbours ahead
// nor maps them, which it does by default (here a fault of a file's mapping made a 64-KiB
// window resident).
func TestReleasedMappingFaultsBackOnePage(t *testing.T) {
	dir := t.TempDir()
	var fs unix.Statfs_t
	if err := unix.Statfs(dir, &fs); err != nil {
		t.Fatal(err)
	}
	if fs.Type == unix.TMPFS_MAGIC || fs.Type == unix.RAMFS_MAGIC {
		t.Skipf("%s is in memory (tmpfs): its pages are never read from a disk, ahead or not", dir)
	}
	path := filepath.Join(dir, "data")
	const size = 4 << 20
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Write(bytes.Repeat([]byte{1}, size)); err != nil {
		t.Fatal(err)
	}
	// Written pages stay cached, and the kernel maps cached neighbours of a fault whatever the
	// advice: out of the cache first.
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	if err := unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED); err != nil {
		t.Fatal(err)
	}
	b, err := unix.Mmap(int(f.Fd()), 0, size, unix.PROT_READ, unix.MAP_PRIVATE)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(b)
	if err := Release(path); err != nil {
		t.Fatal(err)
	}
	if b[size/2] != 1 {
		t.Fatal("the mapping does not read what was written")
	}
	page := int64(os.Getpagesize() / 1024)
	if got := residentOf(t, path).readOnly; got > 2*page {
		t.Errorf("%d kB of the mapping resident after one byte of it was read: want at most two pages (%d kB)", got, 2*page)
	}
}

// A path that is not a file is an error that says which.
func TestReleaseOfAMissingFile(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "absent.so")
	err := Release(missing)
	if err == nil || !bytes.Contains([]byte(err.Error()), []byte(missing)) {
		t.Fatalf("Release of a missing file: %v, want an error naming it", err)
	}
}

type resident struct{ readOnly, writable int64 }

// residentOf sums the Rss of this process's mappings of the file at path, from /proc/self/smaps.
func residentOf(t *testing.T, path string) resident {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	st := fi.Sys().(*syscall.Stat_t)
	ino := strconv.FormatUint(st.Ino, 10)
	f, err := os.Open("/proc/self/smaps")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var r resident
	var ours, writable bool
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := bytes.Fields(sc.Bytes())
		if len(fields) >= 5 && bytes.Contains(fields[0], []byte("-")) && len(fields[1]) == 4 {
			ours = len(fields) >= 6 && (string(fields[5]) == path || string(fields[4]) == ino)
			writable = fields[1][1] == 'w'
			continue
		}
		if ours && len(fields) >= 2 && string(fields[0]) == "Rss:" {
			kb, err := strconv.ParseInt(string(fields[1]), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			if writable {
				r.writable += kb
			} else {
				r.readOnly += kb
			}
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return r
}
