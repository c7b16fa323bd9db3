package kubecluster

import (
	"context"
	"fmt"
)

// ReplaceServerWith is a rolling-upgrade step that also changes the server's
// configuration: stop the server gracefully and start the same hostname
// (same identity, same port) as sc. A newer version often takes other flags
// than the one it replaces (a feature gate or --runtime-config group version
// the old binary does not know and would refuse), which ReplaceServer, keeping
// the old configuration, cannot express.
//
// sc.Name must be name or empty; sc.Port must be the server's port or 0;
// sc.Version empty means NewVersion. The binary is resolved before anything is
// stopped.
func (c *Cluster) ReplaceServerWith(ctx context.Context, name string, sc ServerConfig) error {
	s, err := c.mustServer(name)
	if err != nil {
		return err
	}
	if sc.Name == "" {
		sc.Name = name
	}
	if sc.Name != name {
		return fmt.Errorf("kubecluster: ReplaceServerWith %s: the new configuration names %q (the hostname is the identity and must stay)", name, sc.Name)
	}
	s.mu.Lock()
	port := s.Port
	s.mu.Unlock()
	if sc.Port == 0 {
		sc.Port = port
	}
	if sc.Port != port {
		return fmt.Errorf("kubecluster: ReplaceServerWith %s: port %d, the server has %d", name, sc.Port, port)
	}
	if sc.Version == "" {
		sc.Version = NewVersion
	}
	bin, err := resolveBinary(&sc)
	if err != nil {
		return err // before stopping anything
	}
	if err := c.StopGraceful(name); err != nil {
		return err
	}
	s.mu.Lock()
	s.spec, s.Version, s.Binary = sc, sc.Version, bin
	s.mu.Unlock()
	if err := s.start(); err != nil {
		return err
	}
	return s.waitReady(ctx, c.cfg.ReadyTimeout)
}
