// Package version says which peertrail this binary is: `peertrail version` prints it and the
// metric peertrail_build_info (metrics.BuildInfo) exports it.
package version

import (
	"runtime"
	"runtime/debug"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/peertrail/peertrail/metrics"
)

// Version is the release this binary was built as, set at link time by a release build:
//
//	go build -ldflags "-X github.com/peertrail/peertrail/internal/version.Version=v0.3.0" ./cmd/peertrail
//
// Otherwise it is the module version the go command recorded (a `go install ...@v0.3.0`), or
// "devel".
var Version = ""

// Info is what a binary knows about its own build.
type Info struct {
	Version   string `json:"version"`
	Revision  string `json:"revision"` // the VCS commit it was built from, "+dirty" when modified; "unknown" outside a checkout
	BuildTime string `json:"buildTime,omitempty"`
	GoVersion string `json:"goVersion"`
	Platform  string `json:"platform"`
}

// Get returns this binary's Info.
func Get() Info {
	i := Info{Version: Version, Revision: "unknown", GoVersion: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}
	bi, ok := debug.ReadBuildInfo()
	if ok {
		if i.Version == "" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			i.Version = bi.Main.Version
		}
		dirty := false
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				i.Revision = s.Value
			case "vcs.time":
				i.BuildTime = s.Value
			case "vcs.modified":
				dirty = s.Value == "true"
			}
		}
		if dirty && i.Revision != "unknown" {
			i.Revision += "+dirty"
		}
	}
	if i.Version == "" {
		i.Version = "devel"
	}
	return i
}

// Collector is the gauge peertrail_build_info: 1, with the labels version, revision and
// goversion.
func Collector() prometheus.Collector {
	i := Get()
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Name:        metrics.BuildInfo,
		Help:        "Always 1; the labels say which peertrail build runs (version, VCS revision, Go version).",
		ConstLabels: prometheus.Labels{"version": i.Version, "revision": i.Revision, "goversion": i.GoVersion},
	})
	g.Set(1)
	return g
}
