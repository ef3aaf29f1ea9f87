package main

import (
	"context"
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/fairgate/fairgate/examples"
	"github.com/fairgate/fairgate/internal/testenv"
)

// need skips the test, saying how to install tool, when it is missing
// (make test installs it: scripts/ensure-packaging.sh).
func need(t *testing.T, tool string) {
	t.Helper()
	testenv.External(t, tool)
	if _, err := exec.LookPath(tool); err != nil {
		t.Skipf("%s is not installed: make test installs it (scripts/ensure-packaging.sh), or apt-get install podman systemd", tool)
	}
}

func run1(t *testing.T, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out))
}

// TestContainerImage builds the image from the Containerfile as `make
// image` does (the static binary built here, copied into an empty image;
// nothing fetched), checks its configuration, and runs the very binary it
// copied (podman run is refused in this sandbox, so the binary is copied
// back out of a created container).
func TestContainerImage(t *testing.T) {
	need(t, "podman")
	bin := testenv.FairgateBinary(t)
	ctx := t.TempDir()
	os.MkdirAll(filepath.Join(ctx, "build"), 0o755)
	os.MkdirAll(filepath.Join(ctx, "examples"), 0o755)
	for src, dst := range map[string]string{bin: "build/fairgate", "../../examples/fairgate.minimal.yaml": "examples/fairgate.minimal.yaml", "../../Containerfile": "Containerfile"} {
		b, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		os.WriteFile(filepath.Join(ctx, dst), b, 0o755)
	}
	ca, _ := os.ReadFile("/etc/ssl/certs/ca-certificates.crt")
	os.WriteFile(filepath.Join(ctx, "build/ca-certificates.crt"), ca, 0o644)
	tag := "localhost/fairgate-test:" + strconv.FormatInt(time.Now().UnixNano(), 36)
	run1(t, "podman", "build", "-q", "--build-arg", "VERSION=v9.9.9-test", "-t", tag, "-f", filepath.Join(ctx, "Containerfile"), ctx)
	t.Cleanup(func() { exec.Command("podman", "rmi", "-f", tag).Run() })

	var img []struct {
		Config struct {
			User         string
			Entrypoint   []string
			Cmd          []string
			Env          []string
			ExposedPorts map[string]struct{}
			Labels       map[string]string
			Healthcheck  any
		}
	}
	if err := json.Unmarshal([]byte(run1(t, "podman", "image", "inspect", tag)), &img); err != nil || len(img) != 1 {
		t.Fatalf("podman image inspect: %v", err)
	}
	c := img[0].Config
	if c.User != "65532:65532" || !slices.Equal(c.Entrypoint, []string{"/fairgate"}) || !slices.Equal(c.Cmd, []string{"serve"}) || c.Healthcheck != nil {
		t.Errorf("user %q, entrypoint %v, cmd %v, healthcheck %v: want a non-root user, /fairgate serve, no HEALTHCHECK", c.User, c.Entrypoint, c.Cmd, c.Healthcheck)
	}
	for _, p := range []string{"8080/tcp", "8081/tcp", "8082/tcp", "8090/tcp"} {
		if _, ok := c.ExposedPorts[p]; !ok {
			t.Errorf("port %s not exposed: %v", p, c.ExposedPorts)
		}
	}
	if c.Labels["org.opencontainers.image.title"] != "fairgate" || c.Labels["org.opencontainers.image.version"] != "v9.9.9-test" || c.Labels["org.opencontainers.image.source"] == "" {
		t.Errorf("labels %v", c.Labels)
	}
	if !slices.Contains(c.Env, "FAIRGATE_CONFIG=/etc/fairgate/fairgate.yaml") || !slices.Contains(c.Env, "FAIRGATE_LISTEN=0.0.0.0:8080") {
		t.Errorf("env %v", c.Env)
	}

	// The binary and config it holds, copied back out.
	id := run1(t, "podman", "create", tag)
	t.Cleanup(func() { exec.Command("podman", "rm", "-f", id).Run() })
	out := t.TempDir()
	run1(t, "podman", "cp", id+":/fairgate", filepath.Join(out, "fairgate"))
	run1(t, "podman", "cp", id+":/etc/fairgate/fairgate.yaml", filepath.Join(out, "fairgate.yaml"))
	f, err := elf.Open(filepath.Join(out, "fairgate"))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Error("the image's binary is dynamically linked: it cannot run in an empty image")
		}
	}
	f.Close()
	v := run1(t, filepath.Join(out, "fairgate"), "version")
	if head, err := exec.Command("git", "rev-parse", "HEAD").Output(); err == nil && !strings.Contains(v, strings.TrimSpace(string(head))) {
		t.Errorf("fairgate version: %q, want the commit %s", v, head)
	}
	if !strings.Contains(v, "go1.") {
		t.Errorf("fairgate version: %q, want the Go version", v)
	}
	run1(t, filepath.Join(out, "fairgate"), "check-config", filepath.Join(out, "fairgate.yaml"))
	if cfg, _ := os.ReadFile(filepath.Join(out, "fairgate.yaml")); hasDemoKey(string(cfg)) {
		t.Error("the image's config holds a published demo API key")
	}
	addr := freeAddr(t)
	sv := exec.Command(filepath.Join(out, "fairgate"), "serve")
	sv.Env = append(os.Environ(), "FAIRGATE_CONFIG="+filepath.Join(out, "fairgate.yaml"), "FAIRGATE_LISTEN="+addr, "FAIRGATE_ADMIN_LISTEN=127.0.0.1:0", "FAIRGATE_DRAIN=0")
	if err := sv.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { sv.Process.Kill(); sv.Wait() }()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if resp, err := http.Get("http://" + addr + "/healthz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("the image's binary does not serve /healthz with the image's config")
		}
	}
}

// TestSystemdUnit checks deploy/fairgate.service with systemd-analyze
// verify (the binary in its place) and that it keeps its hardening.
func TestSystemdUnit(t *testing.T) {
	need(t, "systemd-analyze")
	unit, err := os.ReadFile("../../deploy/fairgate.service")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"DynamicUser=yes", "ProtectSystem=strict", "NoNewPrivileges=yes", "EnvironmentFile=/etc/fairgate/fairgate.env",
		"Restart=on-failure", "ExecReload=/bin/kill -HUP $MAINPID", "ExecStart=/usr/local/bin/fairgate serve", "CapabilityBoundingSet=\n", "PrivateTmp=yes"} {
		if !strings.Contains(string(unit), want) {
			t.Errorf("the unit lacks %q", want)
		}
	}
	dir := t.TempDir()
	env, _ := os.ReadFile("../../deploy/fairgate.env")
	os.WriteFile(filepath.Join(dir, "fairgate.env"), env, 0o600)
	u := strings.NewReplacer("/usr/local/bin/fairgate", testenv.FairgateBinary(t), "/etc/fairgate/fairgate.env", filepath.Join(dir, "fairgate.env")).Replace(string(unit))
	path := filepath.Join(dir, "fairgate.service")
	os.WriteFile(path, []byte(u), 0o644)
	out, err := exec.Command("systemd-analyze", "verify", path).CombinedOutput()
	if err != nil || len(out) > 0 {
		t.Fatalf("systemd-analyze verify: %v\n%s", err, out)
	}
}

// TestVersion: fairgate version and --version name the build and the Go
// version.
func TestVersion(t *testing.T) {
	for _, arg := range []string{"version", "--version"} {
		var out strings.Builder
		if code := run(context.Background(), []string{arg}, &out, io.Discard); code != 0 || !strings.HasPrefix(out.String(), "fairgate ") || !strings.Contains(out.String(), runtime.Version()) {
			t.Errorf("fairgate %s: exit %d, %q", arg, code, out.String())
		}
	}
}

// hasDemoKey reports whether text holds one of examples.DemoAPIKeys, or
// its SHA-256 as a config holds it.
func hasDemoKey(text string) bool {
	for _, k := range examples.DemoAPIKeys {
		sum := sha256.Sum256([]byte(k))
		if strings.Contains(text, k) || strings.Contains(strings.ToLower(text), hex.EncodeToString(sum[:])) {
			return true
		}
	}
	return false
}

// helmSet renders the chart (release t) with --set values and returns
// the output, or the error with the output.
func helmSet(set ...string) (string, error) {
	args := []string{"t", "../../deploy/helm/fairgate"}
	for _, s := range set {
		args = append(args, "--set", s)
	}
	return helmTemplate(args...)
}

// render runs helm template on the chart with --set values and returns
// the objects by kind.
func render(t *testing.T, set ...string) map[string]map[string]any {
	t.Helper()
	out, err := helmSet(set...)
	if err != nil {
		t.Fatal(err)
	}
	objs := map[string]map[string]any{}
	dec := yaml.NewDecoder(strings.NewReader(out))
	for {
		var o map[string]any
		if err := dec.Decode(&o); err != nil {
			break
		}
		if o != nil {
			objs[o["kind"].(string)] = o
		}
	}
	return objs
}

// dig follows a path of map keys and list indexes through a decoded object.
func dig(v any, path ...any) any {
	for _, p := range path {
		switch k := p.(type) {
		case string:
			m, _ := v.(map[string]any)
			v = m[k]
		case int:
			l, _ := v.([]any)
			if k >= len(l) {
				return nil
			}
			v = l[k]
		}
	}
	return v
}

// TestHelmChart lints the chart and checks what it renders: probes on
// /healthz and /readyz, the drain wired to the grace period and a preStop,
// the config in a ConfigMap whose checksum rolls the pods, the secrets in
// a Secret (never in the Deployment), a PodDisruptionBudget, the
// ServiceMonitor toggle, and a locked-down security context.
func TestHelmChart(t *testing.T) {
	helmLint(t, "../../deploy/helm/fairgate")
	chartCfg, _ := os.ReadFile("../../deploy/helm/fairgate/files/fairgate.yaml")
	example, _ := os.ReadFile("../../examples/fairgate.minimal.yaml")
	if len(example) == 0 || string(chartCfg) != string(example) {
		t.Error("deploy/helm/fairgate/files/fairgate.yaml differs from examples/fairgate.minimal.yaml: copy it again")
	}

	def := render(t)
	for _, k := range []string{"Deployment", "Service", "ConfigMap"} {
		if def[k] == nil {
			t.Errorf("no %s rendered", k)
		}
	}
	if def["ServiceMonitor"] != nil || def["Secret"] != nil || def["PodDisruptionBudget"] != nil {
		t.Error("a ServiceMonitor, Secret or PodDisruptionBudget (one replica: it would block every drain) rendered without being asked for")
	}
	// No published credential, and no per-pod limits across pods.
	if out, _ := helmSet(); hasDemoKey(out) {
		t.Error("the chart's default render holds a published demo API key")
	}
	if dig(def["Deployment"], "spec", "replicas") != 1 {
		t.Errorf("default replicas %v with the memory store: want 1", dig(def["Deployment"], "spec", "replicas"))
	}
	// The rendered config is the starting one, and it validates.
	cfg := dig(def["ConfigMap"], "data", "fairgate.yaml").(string)
	path := filepath.Join(t.TempDir(), "fairgate.yaml")
	os.WriteFile(path, []byte(cfg), 0o600)
	t.Run("check-config", func(t *testing.T) { run1(t, testenv.FairgateBinary(t), "check-config", path) })

	pod := dig(def["Deployment"], "spec", "template")
	c := dig(pod, "spec", "containers", 0)
	if dig(c, "livenessProbe", "httpGet", "path") != "/healthz" || dig(c, "readinessProbe", "httpGet", "path") != "/readyz" {
		t.Errorf("probes: %v %v", dig(c, "livenessProbe"), dig(c, "readinessProbe"))
	}
	if g, stop := dig(pod, "spec", "terminationGracePeriodSeconds"), dig(c, "lifecycle", "preStop", "sleep", "seconds"); g != 37 || stop != 2 {
		t.Errorf("grace %v, preStop %v: want 2 + 5 s drain + 25 s grace + 5 = 37, and a 2 s preStop", g, stop)
	}
	if dig(pod, "spec", "securityContext", "runAsNonRoot") != true || dig(c, "securityContext", "readOnlyRootFilesystem") != true ||
		dig(c, "securityContext", "allowPrivilegeEscalation") != false || dig(c, "securityContext", "capabilities", "drop", 0) != "ALL" {
		t.Errorf("security context: %v %v", dig(pod, "spec", "securityContext"), dig(c, "securityContext"))
	}
	if dig(c, "resources", "limits", "memory") == nil {
		t.Error("no memory limit")
	}
	sum := dig(pod, "metadata", "annotations", "checksum/config")
	if other := render(t, "config=headers: x"); dig(other["Deployment"], "spec", "template", "metadata", "annotations", "checksum/config") == sum {
		t.Error("a config change does not change the checksum annotation: the pods would not roll")
	}

	all := render(t, "replicaCount=3", "store.url=redis://redis:6379", "store.password=s3cret-store", "adminToken=s3cret-admin", "internalToken=s3cret-internal", "serviceMonitor.enabled=true", "upstream=http://api:9000")
	if all["ServiceMonitor"] == nil || all["Secret"] == nil || all["PodDisruptionBudget"] == nil {
		t.Fatal("the ServiceMonitor, the Secret or the PodDisruptionBudget is missing")
	}
	sec := dig(all["Secret"], "stringData")
	if dig(sec, "admin-token") != "s3cret-admin" || dig(sec, "store-password") != "s3cret-store" {
		t.Errorf("secret %v", sec)
	}
	dep, _ := json.Marshal(all["Deployment"])
	if strings.Contains(string(dep), "s3cret") {
		t.Error("a secret's value is in the Deployment")
	}
	if !strings.Contains(string(dep), "password_file=/etc/fairgate/secrets/store-password") || !strings.Contains(string(dep), `"secretKeyRef":{"key":"admin-token"`) {
		t.Errorf("the Deployment does not take the password as a file and the token from the Secret: %s", dep)
	}
	if traced := render(t, "extraEnv[0].name=OTEL_EXPORTER_OTLP_ENDPOINT", "extraEnv[0].value=http://otel:4318"); !strings.Contains(fmt.Sprint(dig(traced["Deployment"], "spec", "template", "spec", "containers", 0, "env")), "OTEL_EXPORTER_OTLP_ENDPOINT") {
		t.Error("extraEnv is not in the container's environment")
	}
	if dig(all["ServiceMonitor"], "spec", "endpoints", 0, "port") != "internal" {
		t.Error("in proxy mode the ServiceMonitor must scrape the internal port")
	}
	testHelmProbes(t, def, all)
}

// testHelmProbes: the probes are on the internal port in proxy mode (out
// of tenants' reach, so that a flood on the public port restarts no pod;
// on main liveness was on the public port), readiness follows the store
// only with readyRequiresStore (FAIRGATE_READY_REQUIRES_STORE), which a
// memory store refuses at render time.
func testHelmProbes(t *testing.T, def, proxy map[string]map[string]any) {
	t.Helper()
	probes := func(objs map[string]map[string]any) (live, ready any) {
		c := dig(objs["Deployment"], "spec", "template", "spec", "containers", 0)
		return dig(c, "livenessProbe", "httpGet", "port"), dig(c, "readinessProbe", "httpGet", "port")
	}
	if live, ready := probes(def); live != "http" || ready != "http" {
		t.Errorf("decision service: liveness on %v, readiness on %v; want both on http", live, ready)
	}
	if live, ready := probes(proxy); live != "internal" || ready != "internal" {
		t.Errorf("proxy mode: liveness on %v, readiness on %v; want both on internal", live, ready)
	}
	env := func(objs map[string]map[string]any) string {
		return fmt.Sprint(dig(objs["Deployment"], "spec", "template", "spec", "containers", 0, "env"))
	}
	if strings.Contains(env(proxy), "FAIRGATE_READY_REQUIRES_STORE") {
		t.Error("FAIRGATE_READY_REQUIRES_STORE set without readyRequiresStore: readiness would follow Redis by default")
	}
	if on := render(t, "store.url=redis://redis:6379", "readyRequiresStore=true"); !strings.Contains(env(on), "map[name:FAIRGATE_READY_REQUIRES_STORE value:true]") {
		t.Errorf("readyRequiresStore=true: no FAIRGATE_READY_REQUIRES_STORE=true in %s", env(on))
	}
	out, err := helmSet("readyRequiresStore=true")
	if err == nil || !strings.Contains(err.Error(), "readyRequiresStore makes /readyz follow a shared store") {
		t.Errorf("readyRequiresStore with the memory store rendered (%v): %s", err, out)
	}
}

// TestHelmChartRefusesPerPodLimits: the memory store with more than one
// pod (replicas, or an autoscaler's maximum) is refused at render time
// with a message saying why and what to set; allowPerPodLimits accepts
// it; a Redis store needs no such consent.
func TestHelmChartRefusesPerPodLimits(t *testing.T) {
	for _, set := range [][]string{
		{"replicaCount=2"},
		{"replicaCount=1", "autoscaling.enabled=true", "autoscaling.maxReplicas=3"},
		{"replicaCount=2", "store.url=memory://?max_keys=1000"},
	} {
		_, err := helmSet(set...)
		if err == nil || !strings.Contains(err.Error(), "store.url is memory:// with up to") || !strings.Contains(err.Error(), "allowPerPodLimits=true") {
			t.Errorf("%v: %v; want the refusal of per-pod limits", set, err)
		}
	}
	for _, set := range [][]string{
		{"replicaCount=2", "allowPerPodLimits=true"},
		{"replicaCount=2", "store.url=redis://redis:6379"},
		{"replicaCount=1", "autoscaling.enabled=false", "autoscaling.maxReplicas=3"},
	} {
		objs := render(t, set...)
		if objs["Deployment"] == nil {
			t.Errorf("%v: no Deployment", set)
		}
	}
}

// TestHelmChartInternalPort: in proxy mode the internal listener (decision
// API, /metrics) listens on the pod for the probes but is not on the
// Service unless asked for, and then only with its token.
func TestHelmChartInternalPort(t *testing.T) {
	servicePorts := func(objs map[string]map[string]any) []any {
		var names []any
		for _, p := range dig(objs["Service"], "spec", "ports").([]any) {
			names = append(names, dig(p, "name"))
		}
		return names
	}
	proxy := render(t, "upstream=http://api:9000")
	if names := servicePorts(proxy); slices.Contains(names, "internal") {
		t.Errorf("the Service carries the internal port by default: %v", names)
	}
	if dig(proxy["Deployment"], "spec", "template", "spec", "containers", 0, "readinessProbe", "httpGet", "port") != "internal" {
		t.Error("the readiness probe left the internal port")
	}
	for _, set := range [][]string{
		{"upstream=http://api:9000", "internalService.enabled=true"},
		{"upstream=http://api:9000", "serviceMonitor.enabled=true"},
	} {
		if _, err := helmSet(set...); err == nil || !strings.Contains(err.Error(), "would be on the Service with no token: set internalToken") {
			t.Errorf("%v: %v; want a refusal without internalToken", set, err)
		}
		on := render(t, append(set, "internalToken=s3cret-internal")...)
		if names := servicePorts(on); !slices.Contains(names, "internal") {
			t.Errorf("%v with internalToken: the Service lacks the internal port: %v", set, names)
		}
	}
}

// TestDescribeBuild: the version line names the commit Go stamped when no
// release version was linked in, and says how to get one when Go stamped
// none (go run).
func TestDescribeBuild(t *testing.T) {
	stamped := &debug.BuildInfo{Main: debug.Module{Version: "v0.0.0-20261205040145-1b9a5e60142a"}, Settings: []debug.BuildSetting{
		{Key: "vcs.revision", Value: "1b9a5e60142a313052d6aa69ad54010d5ab82095"},
		{Key: "vcs.time", Value: "2026-12-05T04:01:45Z"},
		{Key: "vcs.modified", Value: "false"},
	}}
	modified := &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}, Settings: []debug.BuildSetting{
		{Key: "vcs.revision", Value: "1b9a5e6"}, {Key: "vcs.modified", Value: "true"},
	}}
	goRun := &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}}
	for _, c := range []struct {
		name, linker string
		bi           *debug.BuildInfo
		want         string
	}{
		{"release", "v1.4.0", stamped, "fairgate v1.4.0 (commit 1b9a5e60142a313052d6aa69ad54010d5ab82095, 2026-12-05T04:01:45Z) go1.26.8 linux/amd64"},
		{"go build in a checkout", "", stamped, "fairgate v0.0.0-20261205040145-1b9a5e60142a (commit 1b9a5e60142a313052d6aa69ad54010d5ab82095, 2026-12-05T04:01:45Z) go1.26.8 linux/amd64"},
		{"changed tree", "", modified, "fairgate devel (commit 1b9a5e6 (modified)) go1.26.8 linux/amd64"},
		{"go run", "", goRun, "fairgate devel (commit none recorded: go run stamps none, nor a build outside a git checkout or with -buildvcs=false (GOFLAGS); make build stamps one) go1.26.8 linux/amd64"},
		{"no build info", "", nil, "fairgate devel (commit none recorded: go run stamps none, nor a build outside a git checkout or with -buildvcs=false (GOFLAGS); make build stamps one) go1.26.8 linux/amd64"},
	} {
		if got := describeBuild(c.linker, c.bi, "go1.26.8", "linux/amd64"); got != c.want {
			t.Errorf("%s:\n got %s\nwant %s", c.name, got, c.want)
		}
	}
}

// TestBuiltBinaryNamesItsCommit: a binary built in this checkout says
// the commit it was built from, read from what Go stamped (no linker flag).
func TestBuiltBinaryNamesItsCommit(t *testing.T) {
	head, err := exec.Command("git", "rev-parse", "HEAD").Output()
	if err != nil {
		t.Skip("not in a git checkout:", err)
	}
	v := run1(t, testenv.FairgateBinary(t), "version")
	if !strings.Contains(v, strings.TrimSpace(string(head))) {
		t.Errorf("fairgate version: %q, want the commit %s", v, head)
	}
}

// TestSecondSignalStopsAtOnce: the first Ctrl-C starts the drain (here
// 30 s); a second one ends the process at once.
func TestSecondSignalStopsAtOnce(t *testing.T) {
	addr := freeAddr(t)
	sv := exec.Command(testenv.FairgateBinary(t), "serve", "--listen", addr, "--drain", "30s")
	if err := sv.Start(); err != nil {
		t.Fatal(err)
	}
	defer sv.Process.Kill()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if resp, err := http.Get("http://" + addr + "/healthz"); err == nil {
			resp.Body.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("fairgate serve did not answer /healthz")
		}
	}
	sv.Process.Signal(os.Interrupt)
	// Draining: /readyz answers 503 while the listeners still serve.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		resp, err := http.Get("http://" + addr + "/readyz")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode == 503 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the first Ctrl-C did not start the drain")
		}
	}
	sv.Process.Signal(os.Interrupt)
	done := make(chan error, 1)
	go func() { done <- sv.Wait() }()
	select {
	case <-done:
	case <-time.After(15 * time.Second):
		t.Fatal("a second Ctrl-C did not end the process: it waits for the 30 s drain")
	}
}
