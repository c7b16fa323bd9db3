package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"time"

	"github.com/peertrail/peertrail/internal/kubecluster"
)

// realUpgrade plays the rolling upgrade on real kube-apiservers (the binaries scripts/build-kube.sh
// builds for the end-to-end tests): two 1.35 servers and one 1.36 on loopback, MVP on, each
// one's audit webhook pointed at peertrail; then the faults an upgrade meets: the only server of
// a resource stopped gracefully (misleading 404s), the same one killed (503s), and an upgrade
// step that replaces a 1.35 server with a 1.36 one.
func realUpgrade(ctx context.Context, webhookBase, dir string, out io.Writer) error {
	for _, v := range []string{kubecluster.OldVersion, kubecluster.NewVersion} {
		if _, err := kubecluster.Binary(v); err != nil {
			return fmt.Errorf("--real needs real kube-apiservers: %w", err)
		}
	}
	pki, err := kubecluster.NewPKI(filepath.Join(dir, "pki"))
	if err != nil {
		return err
	}
	newOnly := map[string]bool{"GenericWorkload": true}
	podgroupsOn := map[string]string{"scheduling.k8s.io/v1alpha2": "true"}
	say := func(format string, args ...any) { fmt.Fprintf(out, "  "+format+"\n", args...) }
	say("starting etcd and kube-apiservers kas-a, kas-b (%s) and kas-c (%s)...", kubecluster.OldVersion, kubecluster.NewVersion)
	c, err := kubecluster.Start(ctx, nil, kubecluster.Config{
		Dir: dir, PKI: pki, LogTailLines: -1,
		Servers: []kubecluster.ServerConfig{
			{Name: "kas-a", Version: kubecluster.OldVersion},
			{Name: "kas-b", Version: kubecluster.OldVersion},
			{Name: "kas-c", Version: kubecluster.NewVersion, FeatureGates: newOnly, RuntimeConfig: podgroupsOn},
		},
		Webhook: &kubecluster.WebhookConfig{URL: func(name string) string { return webhookBase + "/audit/" + name }, BatchMaxWait: time.Second},
	})
	if err != nil {
		return fmt.Errorf("start the control plane: %w", err)
	}
	defer c.Close()

	const podgroups = "/apis/scheduling.k8s.io/v1alpha2/namespaces/default/podgroups"
	traffic := func(n int, entries ...string) map[int]int {
		codes := map[int]int{}
		for i := range n {
			for _, e := range entries {
				path := podgroups
				if i%4 == 3 {
					path += "/missing" // a 404 from the peer, forwarded as it is
				}
				codes[c.Get(ctx, e, path).Code]++
				codes[c.Get(ctx, e, "/api/v1/namespaces/default/configmaps").Code]++
			}
		}
		return codes
	}
	if err := c.WaitPeerProxy(ctx, "kas-a", podgroups); err != nil {
		return err
	}
	say("the 1.35 servers forward podgroups (served by 1.36 only) to kas-c: %v", traffic(10, "kas-a", "kas-b"))

	say("kas-c stops gracefully...")
	if err := c.StopGraceful("kas-c"); err != nil {
		return err
	}
	say("  requests through kas-a while no server of podgroups is up: %v", traffic(5, "kas-a"))
	if err := restart(ctx, c, "kas-c", kubecluster.NewVersion, podgroups); err != nil {
		return err
	}
	say("kas-c is SIGKILLed...")
	if err := c.Kill("kas-c"); err != nil {
		return err
	}
	say("  requests through kas-b while kas-c's lease lives on: %v", traffic(5, "kas-b"))
	if err := restart(ctx, c, "kas-c", kubecluster.NewVersion, podgroups); err != nil {
		return err
	}
	say("upgrade step: kas-a is replaced by %s...", kubecluster.NewVersion)
	if err := c.ReplaceServer(ctx, "kas-a", kubecluster.NewVersion); err != nil {
		return err
	}
	// podgroups is alpha in 1.36: the replaced kas-a does not enable it, so it forwards as before,
	// now as a 1.36 entry.
	say("  kas-a (now %s, podgroups not enabled) and kas-b: %v", kubecluster.NewVersion, traffic(10, "kas-a", "kas-b"))
	if _, err := c.WaitStatus(ctx, "kas-a", podgroups, time.Minute, http.StatusOK); err != nil {
		return err
	}
	return nil
}

func restart(ctx context.Context, c *kubecluster.Cluster, name, version, path string) error {
	if err := c.StartServer(ctx, name, version); err != nil {
		return fmt.Errorf("restart %s: %w", name, err)
	}
	return c.WaitPeerProxy(ctx, "kas-b", path)
}
