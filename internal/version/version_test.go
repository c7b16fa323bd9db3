package version

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/peertrail/peertrail/metrics"
)

func TestBuildInfoMetric(t *testing.T) {
	r := prometheus.NewRegistry()
	r.MustRegister(Collector())
	i := Get()
	want := `# HELP peertrail_build_info Always 1; the labels say which peertrail build runs (version, VCS revision, Go version).
# TYPE peertrail_build_info gauge
peertrail_build_info{goversion="` + i.GoVersion + `",revision="` + i.Revision + `",version="` + i.Version + `"} 1
`
	if err := testutil.GatherAndCompare(r, strings.NewReader(want), metrics.BuildInfo); err != nil {
		t.Fatal(err)
	}
	if i.Version == "" || i.GoVersion == "" {
		t.Fatalf("incomplete: %+v", i)
	}
}
