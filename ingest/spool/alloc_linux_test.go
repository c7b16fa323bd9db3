package spool

import (
	"encoding/binary"
	"os"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// unwrittenExtents counts the extents of f that the filesystem marks allocated but unwritten
// (FS_IOC_FIEMAP), or returns an error where the filesystem cannot say.
func unwrittenExtents(f *os.File) (int, error) {
	const (
		fsIocFiemap       = 0xC020660B
		fiemapFlagSync    = 0x1
		extentUnwritten   = 0x800
		headerBytes       = 32
		extentBytes       = 56
		extentFlagsOffset = 40
		maxExtents        = 512
	)
	buf := make([]byte, headerBytes+maxExtents*extentBytes)
	binary.NativeEndian.PutUint64(buf[8:], ^uint64(0)) // length: the whole file
	binary.NativeEndian.PutUint32(buf[16:], fiemapFlagSync)
	binary.NativeEndian.PutUint32(buf[24:], maxExtents)
	if _, _, errno := unix.Syscall(unix.SYS_IOCTL, f.Fd(), fsIocFiemap, uintptr(unsafe.Pointer(&buf[0]))); errno != 0 {
		return 0, errno
	}
	n := 0
	for i := range int(binary.NativeEndian.Uint32(buf[20:])) {
		if binary.NativeEndian.Uint32(buf[headerBytes+i*extentBytes+extentFlagsOffset:])&extentUnwritten != 0 {
			n++
		}
	}
	return n, nil
}

// The segment made ahead of use is written, not only allocated: a frame's sync over space the
// filesystem still marks unwritten would have to commit the change through its journal.
func TestSpareSegmentHasNoUnwrittenSpace(t *testing.T) {
	s := open(t, t.TempDir(), func(o *Options) { o.SegmentBytes = 1 << 20 })
	defer s.Close()
	spare := waitAhead(t, s)
	// The active segment was made on demand (allocated only) at open: it shows whether this
	// filesystem reports unwritten space at all.
	s.mu.Lock()
	active := s.active
	s.mu.Unlock()
	if n, err := unwrittenExtents(active); err != nil || n == 0 {
		t.Skipf("the filesystem does not report unwritten extents here (%d, %v)", n, err)
	}
	n, err := unwrittenExtents(spare)
	if err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Fatalf("the segment made ahead has %d unwritten extents", n)
	}
}
