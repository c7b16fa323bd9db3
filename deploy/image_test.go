package deploy

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// dockerfile is what the repository's Dockerfile says about the image it builds. No image is
// built here (no container runtime in the tests): this only reads the recipe.
type dockerfile struct {
	stages       [][]string // instructions per stage, continuation lines joined
	final        []string
	env          map[string]string // ENV of the final stage
	user         string
	entrypoint   string
	copies       map[string]string // final stage: destination -> the whole COPY instruction
	buildCommand string            // the `docker build -t ... .` of the header comment
}

func readDockerfile(t *testing.T, root string) dockerfile {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	d := dockerfile{env: map[string]string{}, copies: map[string]string{}}
	var cur string
	for _, line := range strings.Split(string(b), "\n") {
		trimmed := strings.TrimSpace(line)
		if strings.HasPrefix(trimmed, "#") {
			if m := regexp.MustCompile(`docker build -t (\S+) \.$`).FindStringSubmatch(trimmed); m != nil {
				d.buildCommand = m[1]
			}
			continue
		}
		if cur == "" && trimmed == "" {
			continue
		}
		cur += " " + strings.TrimSuffix(trimmed, "\\")
		if strings.HasSuffix(trimmed, "\\") {
			continue
		}
		ins := strings.TrimSpace(cur)
		cur = ""
		if strings.HasPrefix(ins, "FROM ") {
			d.stages = append(d.stages, nil)
		}
		if len(d.stages) == 0 {
			t.Fatalf("Dockerfile: %q before the first FROM", ins)
		}
		d.stages[len(d.stages)-1] = append(d.stages[len(d.stages)-1], ins)
	}
	if len(d.stages) == 0 {
		t.Fatal("Dockerfile: no FROM")
	}
	d.final = d.stages[len(d.stages)-1]
	for _, ins := range d.final {
		f := strings.Fields(ins)
		switch f[0] {
		case "ENV":
			for _, kv := range f[1:] {
				k, v, _ := strings.Cut(kv, "=")
				d.env[k] = v
			}
		case "USER":
			d.user = f[1]
		case "ENTRYPOINT":
			d.entrypoint = strings.Join(f[1:], " ")
		case "COPY":
			d.copies[f[len(f)-1]] = ins
		}
	}
	return d
}

// The image and deploy/base agree: where libchdb.so is, the user, the data directory, the
// entrypoint; the tag the build command names is the one the base kustomization deploys; the
// library is fetched by scripts/fetch-chdb.sh (its version and SHA-256 are pinned there); the
// Go toolchain is at least go.mod's.
func TestImageMatchesDeployment(t *testing.T) {
	root := repoRoot(t)
	d := readDockerfile(t, root)

	var dep struct {
		Spec struct {
			Template struct {
				Spec struct {
					SecurityContext struct {
						RunAsUser, RunAsGroup int
					} `json:"securityContext"`
					Containers []struct {
						Args         []string
						Env          []struct{ Name, Value string }
						VolumeMounts []struct {
							Name, MountPath string
						} `json:"volumeMounts"`
					}
				}
			}
		}
	}
	b, err := os.ReadFile(filepath.Join(root, "deploy/base/deployment.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, &dep); err != nil {
		t.Fatal(err)
	}
	pod := dep.Spec.Template.Spec
	if len(pod.Containers) != 1 {
		t.Fatalf("deployment.yaml: %d containers, want 1", len(pod.Containers))
	}
	c := pod.Containers[0]

	// libchdb.so: the Deployment's CHDB_LIB_PATH is the image's, and the image puts the
	// library fetched by scripts/fetch-chdb.sh there.
	lib := d.env["CHDB_LIB_PATH"]
	if lib == "" {
		t.Fatal("Dockerfile: the final stage sets no CHDB_LIB_PATH")
	}
	depLib := ""
	for _, e := range c.Env {
		if e.Name == "CHDB_LIB_PATH" {
			depLib = e.Value
		}
	}
	if depLib != lib {
		t.Errorf("deployment.yaml: CHDB_LIB_PATH %q, the image's is %q", depLib, lib)
	}
	if cp, ok := d.copies[lib]; !ok || !strings.Contains(cp, "libchdb.so") {
		t.Errorf("Dockerfile: nothing copies libchdb.so to CHDB_LIB_PATH %s (copies: %v)", lib, d.copies)
	}
	fetched := false
	for _, stage := range d.stages[:len(d.stages)-1] {
		for _, ins := range stage {
			if strings.HasPrefix(ins, "RUN ") && strings.Contains(ins, "fetch-chdb.sh") {
				fetched = true
			}
		}
	}
	if !fetched {
		t.Error("Dockerfile: no build stage runs scripts/fetch-chdb.sh (the pinned, verified download)")
	}

	// Non-root, the Deployment's user and group.
	want := strconv.Itoa(pod.SecurityContext.RunAsUser) + ":" + strconv.Itoa(pod.SecurityContext.RunAsGroup)
	if pod.SecurityContext.RunAsUser == 0 || d.user != want {
		t.Errorf("Dockerfile: USER %q, the Deployment runs as %s (non-root)", d.user, want)
	}

	// The data directory: --data-dir is where the claim is mounted and what the image creates,
	// owned by that user.
	dataDir := ""
	for _, a := range c.Args {
		if v, ok := strings.CutPrefix(a, "--data-dir="); ok {
			dataDir = v
		}
	}
	mounted := false
	for _, m := range c.VolumeMounts {
		if m.Name == "data" && m.MountPath == dataDir {
			mounted = true
		}
	}
	if dataDir == "" || !mounted {
		t.Errorf("deployment.yaml: --data-dir %q is not where the data volume is mounted", dataDir)
	}
	if cp, ok := d.copies[dataDir]; !ok || !strings.Contains(cp, "--chown="+want) {
		t.Errorf("Dockerfile: the data directory %s is not created owned by %s (copies: %v)", dataDir, want, d.copies)
	}

	// The Deployment's args are peertrail's subcommand and flags: the entrypoint is the binary.
	if len(c.Args) == 0 || c.Args[0] != "serve" {
		t.Errorf("deployment.yaml: args %v do not start with serve", c.Args)
	}
	m := regexp.MustCompile(`^\["([^"]+/peertrail)"\]$`).FindStringSubmatch(d.entrypoint)
	if m == nil {
		t.Fatalf("Dockerfile: ENTRYPOINT %s, want the peertrail binary alone (exec form)", d.entrypoint)
	}
	if _, ok := d.copies[m[1]]; !ok {
		t.Errorf("Dockerfile: nothing copies the binary to the entrypoint %s", m[1])
	}

	// The tag built is the one deployed.
	var kust struct {
		Images []struct{ Name, NewName, NewTag string } `json:"images"`
	}
	b, err = os.ReadFile(filepath.Join(root, "deploy/base/kustomization.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, &kust); err != nil {
		t.Fatal(err)
	}
	ref := ""
	for _, im := range kust.Images {
		if im.Name == "peertrail" {
			ref = im.NewName + ":" + im.NewTag
		}
	}
	if ref == ":" || d.buildCommand != ref {
		t.Errorf("Dockerfile's build command tags %q, deploy/base deploys %q", d.buildCommand, ref)
	}

	// The Go toolchain of the build stage is at least go.mod's (else the build downloads one).
	gomod, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	goLine := regexp.MustCompile(`(?m)^go (\d+(?:\.\d+)*)$`).FindSubmatch(gomod)
	image := ""
	for _, stage := range d.stages {
		if m := regexp.MustCompile(`^FROM .*\bgolang:(\d+(?:\.\d+)*)-`).FindStringSubmatch(stage[0]); m != nil {
			image = m[1]
		}
	}
	if goLine == nil || image == "" {
		t.Fatalf("go.mod's go line %q, the Dockerfile's golang image %q", goLine, image)
	}
	if versionLess(image, string(goLine[1])) {
		t.Errorf("Dockerfile builds with golang:%s, go.mod needs go %s", image, goLine[1])
	}
}

// versionLess compares dotted decimal versions (1.26 < 1.26.8).
func versionLess(a, b string) bool {
	as, bs := strings.Split(a, "."), strings.Split(b, ".")
	for i := 0; i < max(len(as), len(bs)); i++ {
		var x, y int
		if i < len(as) {
			x, _ = strconv.Atoi(as[i])
		}
		if i < len(bs) {
			y, _ = strconv.Atoi(bs[i])
		}
		if x != y {
			return x < y
		}
	}
	return false
}
