package chdb

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"unsafe"

	"github.com/ebitengine/purego"
)

// Version is the chDB release this package is written and tested against; it
// is the version scripts/fetch-chdb.sh downloads.
const Version = "26.7.3-stable.1"

// systemLibPath is the last place Open looks for the library.
const systemLibPath = "/usr/local/lib/libchdb.so"

// DefaultLibPath returns where scripts/fetch-chdb.sh caches the library:
// ${PEERTRAIL_CACHE:-$HOME/.cache/peertrail}/chdb/<Version>/libchdb.so.
// It returns "" when neither PEERTRAIL_CACHE nor the home directory is known.
func DefaultLibPath() string {
	root := os.Getenv("PEERTRAIL_CACHE")
	if root == "" {
		home, err := os.UserHomeDir()
		if err != nil || home == "" {
			return ""
		}
		root = filepath.Join(home, ".cache", "peertrail")
	}
	return filepath.Join(root, "chdb", Version, "libchdb.so")
}

// resolveLibPath picks the library file: the explicit option, then
// $CHDB_LIB_PATH, then the fetch-chdb.sh cache, then /usr/local/lib. An
// explicit option or $CHDB_LIB_PATH that names a missing file is an error
// rather than a silent fall-through, so a typo does not load some other
// library. Every miss wraps ErrLibraryNotFound.
func resolveLibPath(explicit string) (string, error) {
	if explicit != "" {
		return existing(explicit, "--chdb-lib (Options.LibPath)")
	}
	if env := os.Getenv("CHDB_LIB_PATH"); env != "" {
		return existing(env, "$CHDB_LIB_PATH")
	}
	var tried []string
	for _, p := range []string{DefaultLibPath(), systemLibPath} {
		if p == "" {
			continue
		}
		if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() {
			return p, nil
		}
		tried = append(tried, p)
	}
	return "", fmt.Errorf("%w (neither --chdb-lib nor $CHDB_LIB_PATH is set; looked in %q)", ErrLibraryNotFound, tried)
}

func existing(p, source string) (string, error) {
	st, err := os.Stat(p)
	if err != nil {
		return "", fmt.Errorf("%w: %s=%q: %v", ErrLibraryNotFound, source, p, err)
	}
	if !st.Mode().IsRegular() {
		return "", fmt.Errorf("%w: %s=%q is not a regular file", ErrLibraryNotFound, source, p)
	}
	return p, nil
}

// api holds the C functions of libchdb this package calls, bound with purego.
// Types follow chdb.h of chDB 26.7: chdb_connection and chdb_result and
// chdb_insert_stream are opaque pointers (unsafe.Pointer here); size_t is
// uintptr; strings are passed as *byte plus an explicit length so no copy or
// NUL terminator is needed.
type api struct {
	setSignalHandlersEnabled func(enabled int32)
	version                  func() string

	connect   func(argc int32, argv **byte) unsafe.Pointer // chdb_connection *
	closeConn func(conn unsafe.Pointer)                    // takes the chdb_connection *

	queryN           func(conn unsafe.Pointer, q *byte, qlen uintptr, f *byte, flen uintptr) unsafe.Pointer
	queryWithParamsN func(conn unsafe.Pointer, q *byte, qlen uintptr, f *byte, flen uintptr,
		names **byte, nameLens *uintptr, values **byte, valueLens *uintptr, count uintptr) unsafe.Pointer

	destroyResult      func(res unsafe.Pointer)
	resultBuffer       func(res unsafe.Pointer) *byte
	resultLength       func(res unsafe.Pointer) uintptr
	resultElapsed      func(res unsafe.Pointer) float64
	resultRowsRead     func(res unsafe.Pointer) uint64
	resultBytesRead    func(res unsafe.Pointer) uint64
	resultRowsWritten  func(res unsafe.Pointer) uint64
	resultBytesWritten func(res unsafe.Pointer) uint64
	resultStorageRows  func(res unsafe.Pointer) uint64
	resultStorageBytes func(res unsafe.Pointer) uint64
	resultError        func(res unsafe.Pointer) string

	streamInsertN       func(conn unsafe.Pointer, q *byte, qlen uintptr, f *byte, flen uintptr) unsafe.Pointer
	streamAppend        func(stream unsafe.Pointer, data *byte, n uintptr) int32
	streamDone          func(stream unsafe.Pointer) unsafe.Pointer
	streamCancelInsert  func(stream unsafe.Pointer)
	streamInsertError   func(stream unsafe.Pointer) string
	destroyInsertStream func(stream unsafe.Pointer)

	// Optional: nil when the library does not export it (before chDB 26.7.2).
	classifyQueryN func(conn unsafe.Pointer, q *byte, qlen uintptr, db *byte, dblen uintptr, out *queryAnalysisV1) int32

	// Streaming reads (Session.Stream); optional like classifyQueryN, all four or none.
	streamQueryN           func(conn unsafe.Pointer, q *byte, qlen uintptr, f *byte, flen uintptr) unsafe.Pointer
	streamQueryWithParamsN func(conn unsafe.Pointer, q *byte, qlen uintptr, f *byte, flen uintptr,
		names **byte, nameLens *uintptr, values **byte, valueLens *uintptr, count uintptr) unsafe.Pointer
	streamFetchResult func(conn unsafe.Pointer, stream unsafe.Pointer) unsafe.Pointer
	streamCancelQuery func(conn unsafe.Pointer, stream unsafe.Pointer)
}

// dlopen loads the library. The handle is never dlclosed: unloading a library
// that started threads and registered atexit handlers is not safe, and dlopen
// of a path that is already loaded just returns the same handle, so re-opening
// after Close is cheap.
func dlopen(path string) (uintptr, error) {
	h, err := purego.Dlopen(path, purego.RTLD_NOW|purego.RTLD_GLOBAL)
	if err != nil {
		return 0, fmt.Errorf("chdb: dlopen %s: %w", path, err)
	}
	return h, nil
}

// bindAPI binds every symbol in api from the library handle h (loaded from
// path). A missing symbol is an error wrapping ErrIncompatibleLibrary, never a
// panic.
func bindAPI(h uintptr, path string) (*api, error) {
	a := &api{}
	bind := []struct {
		fptr any
		name string
	}{
		{&a.setSignalHandlersEnabled, "chdb_set_signal_handlers_enabled"},
		{&a.version, "chdb_version"},
		{&a.connect, "chdb_connect"},
		{&a.closeConn, "chdb_close_conn"},
		{&a.queryN, "chdb_query_n"},
		{&a.queryWithParamsN, "chdb_query_with_params_n"},
		{&a.destroyResult, "chdb_destroy_query_result"},
		{&a.resultBuffer, "chdb_result_buffer"},
		{&a.resultLength, "chdb_result_length"},
		{&a.resultElapsed, "chdb_result_elapsed"},
		{&a.resultRowsRead, "chdb_result_rows_read"},
		{&a.resultBytesRead, "chdb_result_bytes_read"},
		{&a.resultRowsWritten, "chdb_result_rows_written"},
		{&a.resultBytesWritten, "chdb_result_bytes_written"},
		{&a.resultStorageRows, "chdb_result_storage_rows_read"},
		{&a.resultStorageBytes, "chdb_result_storage_bytes_read"},
		{&a.resultError, "chdb_result_error"},
		{&a.streamInsertN, "chdb_stream_insert_n"},
		{&a.streamAppend, "chdb_stream_append"},
		{&a.streamDone, "chdb_stream_done"},
		{&a.streamCancelInsert, "chdb_stream_cancel_insert"},
		{&a.streamInsertError, "chdb_stream_insert_error"},
		{&a.destroyInsertStream, "chdb_destroy_insert_stream"},
	}
	var missing []string
	for _, b := range bind {
		sym, err := purego.Dlsym(h, b.name)
		if err != nil || sym == 0 {
			missing = append(missing, b.name)
			continue
		}
		purego.RegisterFunc(b.fptr, sym)
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("%w: %s does not export %v (want chDB %s)", ErrIncompatibleLibrary, path, missing, Version)
	}
	if sym, err := purego.Dlsym(h, "chdb_classify_query_n"); err == nil && sym != 0 {
		purego.RegisterFunc(&a.classifyQueryN, sym)
	}
	stream := []struct {
		fptr any
		name string
	}{
		{&a.streamQueryN, "chdb_stream_query_n"},
		{&a.streamQueryWithParamsN, "chdb_stream_query_with_params_n"},
		{&a.streamFetchResult, "chdb_stream_fetch_result"},
		{&a.streamCancelQuery, "chdb_stream_cancel_query"},
	}
	syms := make([]uintptr, len(stream))
	for i, b := range stream {
		if sym, err := purego.Dlsym(h, b.name); err == nil {
			syms[i] = sym
		}
	}
	if !slices.Contains(syms, 0) {
		for i, b := range stream {
			purego.RegisterFunc(b.fptr, syms[i])
		}
	}
	return a, nil
}

// errNilResult is what a C entry point returning NULL instead of a result maps to.
var errNilResult = errors.New("libchdb returned no result")

// strPtr returns a pointer to the bytes of s for a (pointer, length) C
// argument, or nil for the empty string. The caller keeps s alive.
func strPtr(s string) *byte {
	if s == "" {
		return nil
	}
	return unsafe.StringData(s)
}

// FindLibrary returns the libchdb.so Open would load with Options.LibPath = explicit, or an
// error wrapping ErrLibraryNotFound, without loading it: for checking a configuration before
// anything starts.
func FindLibrary(explicit string) (string, error) { return resolveLibPath(explicit) }
