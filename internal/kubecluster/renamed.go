package kubecluster

import (
	"fmt"
	"os"
	"path/filepath"
)

// RenamedBinary returns the cached kube-apiserver of version under another file name, name,
// in dir (a symbolic link), for ServerConfig.Binary. An apiserver's loopback client names
// itself after the program it runs as ("<name>/<version> (<os>/<arch>) kubernetes/<commit>"),
// so this is how a test sees what a distribution's or a side-by-side install's binary name
// looks like in the audit stream (e.g. "kube-apiserver-1.36").
func RenamedBinary(dir, version, name string) (string, error) {
	bin, err := Binary(version)
	if err != nil {
		return "", err
	}
	if name == "" || name != filepath.Base(name) {
		return "", fmt.Errorf("kubecluster: RenamedBinary: %q is not a file name", name)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("kubecluster: RenamedBinary: %w", err)
	}
	p := filepath.Join(dir, name)
	if err := os.Symlink(bin, p); err != nil {
		return "", fmt.Errorf("kubecluster: RenamedBinary %s as %s: %w", version, name, err)
	}
	return p, nil
}
