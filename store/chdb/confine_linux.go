package chdb

import (
	"fmt"

	"github.com/landlock-lsm/go-landlock/landlock"
	llsyscall "github.com/landlock-lsm/go-landlock/landlock/syscall"
	"golang.org/x/sys/unix"
)

// The system paths the engine reads while it runs (measured with strace over a demo run): the C
// library and its locale data, the dynamic loader's cache, time zones, the host's name and
// how to resolve it, /proc and /sys for its memory and CPU accounting, and random numbers.
// Nothing of /etc but these files: credentials often live there.
var (
	systemReadDirs  = []string{"/lib", "/lib64", "/usr/lib", "/usr/lib64", "/usr/share/locale", "/usr/share/zoneinfo", "/proc", "/sys"}
	systemReadFiles = []string{"/etc/ld.so.cache", "/etc/localtime", "/etc/timezone", "/etc/locale.alias",
		"/etc/nsswitch.conf", "/etc/host.conf", "/etc/resolv.conf", "/etc/hosts", "/etc/hostname", "/etc/gai.conf",
		"/dev/urandom", "/dev/random"}
)

// ruleset is a Landlock ruleset for the engine's threads; fd -1 when the kernel has none.
type ruleset struct {
	fd    int
	flags uint32
}

// confinement builds the engine's ruleset: read the library and the system paths
// (systemReadDirs, systemReadFiles), read and write dataDir and logDir (either may be ""),
// nothing else of the file system, and no TCP at all.
func confinement(libPath, dataDir, logDir string) (*ruleset, error) {
	rules := []landlock.Rule{
		landlock.ROFiles(libPath),
		landlock.ROFiles(systemReadFiles...).IgnoreIfMissing(),
		landlock.RODirs(systemReadDirs...).IgnoreIfMissing(),
		landlock.RWFiles("/dev/null"),
	}
	var rw []string
	for _, d := range []string{dataDir, logDir} {
		if d != "" {
			rw = append(rw, d)
		}
	}
	if len(rw) > 0 {
		rules = append(rules, landlock.RWDirs(rw...).WithRefer())
	}
	fd, flags, err := landlock.V5.BestEffort().NewRulesetFD(rules...)
	if err != nil {
		return nil, fmt.Errorf("chdb: the engine's Landlock ruleset: %w", err)
	}
	// Kept open for the process's life: every engine call thread started later takes it.
	return &ruleset{fd: fd, flags: flags}, nil
}

// enforced reports whether the kernel enforces the ruleset.
func (r *ruleset) enforced() bool { return r != nil && r.fd >= 0 }

// restrictThread confines the calling thread (locked, never to run other goroutines again) and
// every thread it starts from now on.
func (r *ruleset) restrictThread() error {
	if !r.enforced() {
		return nil
	}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("chdb: no_new_privs for the engine's thread: %w", err)
	}
	if err := llsyscall.LandlockRestrictSelf(r.fd, r.flags); err != nil {
		return fmt.Errorf("chdb: Landlock on the engine's thread: %w", err)
	}
	return nil
}
