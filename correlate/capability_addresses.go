package correlate

import (
	"net/netip"
	"slices"
	"sort"
)

// The addresses each apiserver connects from: the hop that shows a forward.

// IsAddressOf reports whether ip is a known address of an apiserver other than except.
func (c *Capabilities) IsAddressOf(ip, except string) (string, bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	for name, info := range c.seen {
		if name != except && slices.Contains(info.Addresses, ip) {
			return name, true
		}
	}
	return "", false
}

// HasAddress reports whether ip is a known address of apiserver.
func (c *Capabilities) HasAddress(apiserver, ip string) bool {
	c.mu.RLock()
	defer c.mu.RUnlock()
	info := c.seen[apiserver]
	return info != nil && slices.Contains(info.Addresses, ip)
}

// NamesOf returns, sorted, the apiservers other than except that ip is a known address of
// (several apiservers can share a host).
func (c *Capabilities) NamesOf(ip, except string) []string {
	c.mu.RLock()
	defer c.mu.RUnlock()
	var out []string
	for name, info := range c.seen {
		if name != except && slices.Contains(info.Addresses, ip) {
			out = append(out, name)
		}
	}
	sort.Strings(out)
	return out
}

// AddressesKnown reports whether every apiserver peertrail knows of, and apiserver itself,
// has a known address: then an address that is none of theirs is no apiserver's.
func (c *Capabilities) AddressesKnown(apiserver string) bool {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if info := c.seen[apiserver]; info == nil || len(info.Addresses) == 0 {
		return false
	}
	for _, info := range c.seen {
		if len(info.Addresses) == 0 {
			return false
		}
	}
	return true
}

// Configured reports whether apiserver's address was configured (NoteServer without a time):
// then it is the address the apiserver forwards from, and no other is.
func (c *Capabilities) Configured(apiserver string) bool {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.configured[apiserver]
}

// HasForwardingAddress reports whether an address apiserver may forward from is known: a
// configured one, or a learned one that is not a loopback address (an apiserver bound to all
// interfaces makes its own calls from 127.0.0.1 but dials its peers from its node's address).
func (c *Capabilities) HasForwardingAddress(apiserver string) bool {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if c.configured[apiserver] {
		return true
	}
	if info := c.seen[apiserver]; info != nil {
		for _, a := range info.Addresses {
			if ip, err := netip.ParseAddr(a); err == nil && !ip.IsLoopback() {
				return true
			}
		}
	}
	return false
}

// IsAPIServerAddress reports whether ip belongs to any known apiserver.
func (c *Capabilities) IsAPIServerAddress(ip string) bool {
	_, ok := c.IsAddressOf(ip, "")
	return ok
}
