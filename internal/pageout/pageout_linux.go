package pageout

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"
)

// Release asks the kernel to page out what is resident of the read-only mappings (code and
// constant data) of the file at path in this process, with MADV_PAGEOUT: the pages no other
// process maps leave the process (the page cache may keep some, unmapped, until the kernel wants
// the memory); the writable mappings are left alone, and a page used again is faulted back. It
// needs Linux 5.4; on an older kernel it fails and changes nothing.
//
// The mappings are marked MADV_RANDOM too, so that a page faulted back comes alone: with the
// kernel's readahead a fault reads its neighbours as well and maps what of them is cached, while
// the pages a long-running program keeps using are scattered across its code (the engine's
// library: BENCHMARKS.md, "A thirty-fifth session").
func Release(path string) error {
	fi, err := os.Stat(path)
	if err != nil {
		return fmt.Errorf("pageout: %s: %w", path, err)
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return fmt.Errorf("pageout: %s: no inode", path)
	}
	resolved, err := filepath.EvalSymlinks(path)
	if err != nil {
		return fmt.Errorf("pageout: %s: %w", path, err)
	}
	if resolved, err = filepath.Abs(resolved); err != nil {
		return fmt.Errorf("pageout: %s: %w", path, err)
	}
	maps, err := readOnlyMappings(resolved, st)
	if err != nil {
		return err
	}
	for _, m := range maps {
		if _, _, errno := unix.Syscall(unix.SYS_MADVISE, m.start, m.end-m.start, unix.MADV_PAGEOUT); errno != 0 {
			return fmt.Errorf("pageout: madvise(MADV_PAGEOUT) of %s at %#x: %w", path, m.start, errno)
		}
		if _, _, errno := unix.Syscall(unix.SYS_MADVISE, m.start, m.end-m.start, unix.MADV_RANDOM); errno != 0 {
			return fmt.Errorf("pageout: madvise(MADV_RANDOM) of %s at %#x: %w", path, m.start, errno)
		}
	}
	return nil
}

// mapping is one address range of /proc/self/maps.
type mapping struct{ start, end uintptr }

// readOnlyMappings returns this process's read-only mappings of the file at path (no symlink)
// that st describes. A mapping is the file's when its path is that path, or when its device
// and inode are st's: on an overlay filesystem (a container's image) the kernel names the
// mapping by one and the file's stat by the other.
func readOnlyMappings(path string, st *syscall.Stat_t) ([]mapping, error) {
	f, err := os.Open("/proc/self/maps")
	if err != nil {
		return nil, fmt.Errorf("pageout: read mappings: %w", err)
	}
	defer f.Close()
	dev := fmt.Sprintf("%02x:%02x", unix.Major(st.Dev), unix.Minor(st.Dev))
	ino := strconv.FormatUint(st.Ino, 10)
	var out []mapping
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// address perms offset dev inode path
		line := sc.Bytes()
		fields := bytes.Fields(line)
		if len(fields) < 6 || bytes.IndexByte(fields[1], 'w') >= 0 {
			continue
		}
		name := string(bytes.TrimSpace(line[bytes.Index(line, fields[5]):]))
		if name != path && (string(fields[3]) != dev || string(fields[4]) != ino) {
			continue
		}
		lo, hi, ok := bytes.Cut(fields[0], []byte("-"))
		if !ok {
			continue
		}
		start, err1 := strconv.ParseUint(string(lo), 16, 64)
		end, err2 := strconv.ParseUint(string(hi), 16, 64)
		if err1 != nil || err2 != nil || end <= start {
			continue
		}
		out = append(out, mapping{uintptr(start), uintptr(end)})
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("pageout: read mappings: %w", err)
	}
	return out, nil
}
