package spool

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"

	"github.com/peertrail/peertrail/internal/fsutil"
)

// identityFile holds the spool's Identity.
const identityFile = "identity"

// loadIdentity reads the spool's identity, or makes a new one: when there is none, and at every
// open under a policy other than SyncAlways, where a crash of the machine can lose frames that
// readers had been given and the positions they had are then written again with other frames.
func (s *Spool) loadIdentity() error {
	path := filepath.Join(s.opts.Dir, identityFile)
	if s.opts.Sync == SyncAlways {
		b, err := os.ReadFile(path)
		if err == nil && identityRE.Match(bytes.TrimSpace(b)) {
			s.identity = string(bytes.TrimSpace(b))
			return nil
		}
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("spool: read identity: %w", err)
		}
	}
	var id [16]byte
	if _, err := rand.Read(id[:]); err != nil {
		return fmt.Errorf("spool: make an identity: %w", err)
	}
	s.identity = hex.EncodeToString(id[:])
	if err := fsutil.WriteFileAtomic(path, []byte(s.identity+"\n")); err != nil {
		return fmt.Errorf("spool: write identity: %w", err)
	}
	return nil
}

var identityRE = regexp.MustCompile(`^[0-9a-f]{32}$`)

// Identity names the spool's address space: a frame is known by the spool's identity and its
// position, and no two frames ever share both. It is 32 lowercase hex digits, made when the
// directory is first used and kept from then on under SyncAlways; under another policy it is
// made anew at every Open, since a crash of the machine there can lose frames readers were
// given, and their positions are then written again with other frames.
func (s *Spool) Identity() string { return s.identity }
