package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	"sigs.k8s.io/yaml"

	"github.com/fairgate/fairgate/internal/app"
	"github.com/fairgate/fairgate/internal/config"
	"github.com/fairgate/fairgate/internal/kubetest"
)

const chartDir = "../../deploy/helm/fairgate"

// serviceMonitor is the part of prometheus-operator's ServiceMonitor
// (monitoring.coreos.com/v1, a CRD: not in k8s.io/api) the chart renders.
// Decoded with unknown fields refused, it holds the chart to these fields:
// bearerTokenSecret, deprecated by prometheus-operator, is deliberately
// absent, so a render with it fails.
type serviceMonitor struct {
	APIVersion string             `json:"apiVersion"`
	Kind       string             `json:"kind"`
	Metadata   metav1ObjectMeta   `json:"metadata"`
	Spec       serviceMonitorSpec `json:"spec"`
}

type metav1ObjectMeta struct {
	Name   string            `json:"name"`
	Labels map[string]string `json:"labels"`
}

type serviceMonitorSpec struct {
	Selector struct {
		MatchLabels map[string]string `json:"matchLabels"`
	} `json:"selector"`
	Endpoints []struct {
		Port          string `json:"port"`
		Path          string `json:"path"`
		Interval      string `json:"interval"`
		Authorization *struct {
			Type        string                   `json:"type"`
			Credentials corev1.SecretKeySelector `json:"credentials"`
		} `json:"authorization"`
	} `json:"endpoints"`
}

// rendered is a chart's render decoded into the API types, one of each
// kind (the chart renders at most one).
type rendered struct {
	Deployment     *appsv1.Deployment
	Service        *corev1.Service
	ConfigMap      *corev1.ConfigMap
	Secret         *corev1.Secret
	ServiceAccount *corev1.ServiceAccount
	HPA            *autoscalingv2.HorizontalPodAutoscaler
	NetworkPolicy  *networkingv1.NetworkPolicy
	PDB            *policyv1.PodDisruptionBudget
	ServiceMonitor *serviceMonitor
}

var docSep = regexp.MustCompile(`(?m)^---\s*$`)

// decodeStrict decodes every object of a helm template output strictly
// (sigs.k8s.io/yaml's UnmarshalStrict: an unknown or duplicated field, or
// a value of the wrong type, is an error) into its Kubernetes API type,
// and fails on a kind the test does not know.
func decodeStrict(out string) (rendered, error) {
	var r rendered
	for _, doc := range docSep.Split(out, -1) {
		var head struct{ APIVersion, Kind string }
		if err := yaml.Unmarshal([]byte(doc), &head); err != nil {
			return r, fmt.Errorf("%v in:\n%s", err, doc)
		}
		if head.Kind == "" {
			continue // comments only
		}
		var dst any
		switch head.APIVersion + " " + head.Kind {
		case "apps/v1 Deployment":
			r.Deployment = &appsv1.Deployment{}
			dst = r.Deployment
		case "v1 Service":
			r.Service = &corev1.Service{}
			dst = r.Service
		case "v1 ConfigMap":
			r.ConfigMap = &corev1.ConfigMap{}
			dst = r.ConfigMap
		case "v1 Secret":
			r.Secret = &corev1.Secret{}
			dst = r.Secret
		case "v1 ServiceAccount":
			r.ServiceAccount = &corev1.ServiceAccount{}
			dst = r.ServiceAccount
		case "autoscaling/v2 HorizontalPodAutoscaler":
			r.HPA = &autoscalingv2.HorizontalPodAutoscaler{}
			dst = r.HPA
		case "networking.k8s.io/v1 NetworkPolicy":
			r.NetworkPolicy = &networkingv1.NetworkPolicy{}
			dst = r.NetworkPolicy
		case "policy/v1 PodDisruptionBudget":
			r.PDB = &policyv1.PodDisruptionBudget{}
			dst = r.PDB
		case "monitoring.coreos.com/v1 ServiceMonitor":
			r.ServiceMonitor = &serviceMonitor{}
			dst = r.ServiceMonitor
		default:
			return r, fmt.Errorf("%s %s: a kind this test does not decode; add its type to decodeStrict", head.APIVersion, head.Kind)
		}
		if err := yaml.UnmarshalStrict([]byte(doc), dst); err != nil {
			return r, fmt.Errorf("%s: %v in:\n%s", head.Kind, err, doc)
		}
	}
	return r, nil
}

// renderTyped renders the chart (release t) with args and decodes it
// strictly.
func renderTyped(t *testing.T, args ...string) rendered {
	t.Helper()
	out, err := helmTemplate(append([]string{"t", chartDir}, args...)...)
	if err != nil {
		t.Fatal(err)
	}
	r, err := decodeStrict(out)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func envOf(c corev1.Container) map[string]corev1.EnvVar {
	m := map[string]corev1.EnvVar{}
	for _, e := range c.Env {
		m[e.Name] = e
	}
	return m
}

// TestHelmChartAPITypes decodes every object the chart renders, strictly,
// into the Kubernetes API types (k8s.io/api; the ServiceMonitor into the
// local serviceMonitor struct), for the default values, the full-featured
// ci/full-values.yaml, envoyproxy/ratelimit's place (ci/rls-values.yaml)
// and the common --set combinations; and checks that the full render
// carries every feature asked for. On main it fails: the ServiceMonitor's
// bearerTokenSecret is not a field of the current API.
func TestHelmChartAPITypes(t *testing.T) {
	chart, err := os.ReadFile(filepath.Join(chartDir, "Chart.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`(?m)^kubeVersion: ">=1\.\d+\.\d+-0"$`).Match(chart) {
		t.Error("Chart.yaml has no kubeVersion")
	}
	for _, args := range [][]string{
		nil,
		{"-f", filepath.Join(chartDir, "ci/full-values.yaml")},
		{"-f", filepath.Join(chartDir, "ci/rls-values.yaml")},
		{"--set", "replicaCount=3,store.url=redis://redis:6379,store.password=p,adminToken=a,internalToken=i,serviceMonitor.enabled=true,upstream=http://api:9000"},
		{"--set", "grpcPort=8082,internalToken=i,serviceMonitor.enabled=true"},
	} {
		out, err := helmTemplate(append([]string{"t", chartDir}, args...)...)
		if err != nil {
			t.Error(err)
			continue
		}
		if r, err := decodeStrict(out); err != nil || r.Deployment == nil || r.Service == nil {
			t.Errorf("%v: %v (or no Deployment or Service)", args, err)
		}
		if _, err := helmTemplate(append([]string{"t", chartDir, "--kube-version", "1.29.0"}, args...)...); err == nil || !strings.Contains(err.Error(), "kubeVersion") {
			t.Errorf("%v: rendered for Kubernetes 1.29 (%v): want the chart's kubeVersion to refuse it (the preStop sleep needs 1.30)", args, err)
		}
	}

	full := renderTyped(t, "-f", filepath.Join(chartDir, "ci/full-values.yaml"))
	if full.HPA == nil || full.NetworkPolicy == nil || full.PDB == nil || full.ServiceMonitor == nil || full.ConfigMap == nil {
		t.Fatalf("full values: HPA %v, NetworkPolicy %v, PDB %v, ServiceMonitor %v, ConfigMap %v: want each", full.HPA != nil, full.NetworkPolicy != nil, full.PDB != nil, full.ServiceMonitor != nil, full.ConfigMap != nil)
	}
	if full.Secret != nil {
		t.Error("full values (existingSecret): the chart rendered a Secret of its own")
	}
	pod := full.Deployment.Spec.Template.Spec
	c := pod.Containers[0]
	if full.Deployment.Spec.Replicas != nil {
		t.Errorf("with autoscaling the Deployment sets replicas %d: each upgrade would undo the autoscaler's choice", *full.Deployment.Spec.Replicas)
	}
	hpa := full.HPA.Spec
	if hpa.ScaleTargetRef.Kind != "Deployment" || hpa.ScaleTargetRef.Name != full.Deployment.Name || *hpa.MinReplicas != 2 || hpa.MaxReplicas != 8 ||
		len(hpa.Metrics) != 1 || hpa.Metrics[0].Resource.Name != corev1.ResourceCPU || *hpa.Metrics[0].Resource.Target.AverageUtilization != 60 {
		t.Errorf("HPA spec %+v", hpa)
	}
	if len(pod.ImagePullSecrets) != 1 || pod.ImagePullSecrets[0].Name != "regcred" {
		t.Errorf("imagePullSecrets %v", pod.ImagePullSecrets)
	}
	if pod.Affinity == nil || pod.Affinity.PodAntiAffinity == nil || len(pod.TopologySpreadConstraints) != 1 || pod.TopologySpreadConstraints[0].TopologyKey != "topology.kubernetes.io/zone" {
		t.Errorf("affinity %v, topologySpreadConstraints %v", pod.Affinity, pod.TopologySpreadConstraints)
	}
	if len(c.EnvFrom) != 2 || c.EnvFrom[0].ConfigMapRef.Name != "fairgate-env" {
		t.Errorf("envFrom %v", c.EnvFrom)
	}
	env := envOf(c)
	if env["OTEL_EXPORTER_OTLP_ENDPOINT"].Value == "" || env["POD_NAME"].ValueFrom == nil {
		t.Errorf("extraEnv missing from %v", c.Env)
	}
	vols := map[string]corev1.Volume{}
	for _, v := range pod.Volumes {
		vols[v.Name] = v
	}
	mounts := map[string]string{}
	for _, m := range c.VolumeMounts {
		mounts[m.Name] = m.MountPath
		if _, ok := vols[m.Name]; !ok {
			t.Errorf("volume mount %s has no volume", m.Name)
		}
	}
	if vols["redis-ca"].Secret == nil || mounts["redis-ca"] != "/etc/fairgate/redis-ca" {
		t.Errorf("extraVolumes/extraVolumeMounts: volumes %v, mounts %v", vols, mounts)
	}
	testExistingSecret(t, full)
	testNetworkPolicy(t, full)
}

// testExistingSecret: with existingSecret every secret value comes from
// that Secret's named keys (the tokens as secretKeyRefs, the password as
// a file), in the Deployment and the ServiceMonitor alike.
func testExistingSecret(t *testing.T, full rendered) {
	t.Helper()
	c := full.Deployment.Spec.Template.Spec.Containers[0]
	env := envOf(c)
	for name, key := range map[string]string{"FAIRGATE_ADMIN_TOKEN": "admin-token", "FAIRGATE_INTERNAL_TOKEN": "internal-token"} {
		e := env[name]
		if e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil || e.ValueFrom.SecretKeyRef.Name != "fairgate-secrets" || e.ValueFrom.SecretKeyRef.Key != key {
			t.Errorf("%s: %+v, want the key %s of Secret fairgate-secrets", name, e, key)
		}
	}
	if !strings.Contains(env["FAIRGATE_STORE"].Value, "&password_file=/etc/fairgate/secrets/store-password") {
		t.Errorf("FAIRGATE_STORE %q: want the password as a file", env["FAIRGATE_STORE"].Value)
	}
	var secretVol *corev1.SecretVolumeSource
	for _, v := range full.Deployment.Spec.Template.Spec.Volumes {
		if v.Name == "secrets" {
			secretVol = v.Secret
		}
	}
	if secretVol == nil || secretVol.SecretName != "fairgate-secrets" || len(secretVol.Items) != 1 || secretVol.Items[0].Key != "redis-password" || secretVol.Items[0].Path != "store-password" {
		t.Errorf("the password's volume %+v: want key redis-password of fairgate-secrets at store-password", secretVol)
	}
	ep := full.ServiceMonitor.Spec.Endpoints[0]
	if ep.Authorization == nil || ep.Authorization.Type != "Bearer" || ep.Authorization.Credentials.Name != "fairgate-secrets" || ep.Authorization.Credentials.Key != "internal-token" {
		t.Errorf("ServiceMonitor authorization %+v: want Bearer from fairgate-secrets/internal-token", ep.Authorization)
	}
}

// testNetworkPolicy: the public port is open to publicFrom; the internal,
// admin and gRPC ports each only to their own peers, never to anyone.
func testNetworkPolicy(t *testing.T, full rendered) {
	t.Helper()
	np := full.NetworkPolicy.Spec
	if !slices.Equal(np.PolicyTypes, []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}) || np.PodSelector.MatchLabels["app.kubernetes.io/name"] != "fairgate" {
		t.Errorf("NetworkPolicy policyTypes %v, podSelector %v", np.PolicyTypes, np.PodSelector)
	}
	from := map[string]string{}
	for _, rule := range np.Ingress {
		if len(rule.Ports) != 1 {
			t.Fatalf("a rule with %d ports: %+v", len(rule.Ports), rule)
		}
		b, _ := json.Marshal(rule.From)
		from[rule.Ports[0].Port.String()] = string(b)
	}
	for port, want := range map[string]string{"http": "ingress-nginx", "internal": "prometheus", "admin": "fairgate-admin", "grpc": "istio-system"} {
		if !strings.Contains(from[port], want) {
			t.Errorf("port %s reachable from %s; want only the configured peers (%s)", port, from[port], want)
		}
	}
	if !strings.Contains(from["grpc"], `"cidr":"10.0.0.0/8"`) {
		t.Errorf("grpc's ipBlock peer is lost: %s", from["grpc"])
	}
	// No peers for a port: not opened at all, never opened to everyone.
	r := renderTyped(t, "--set", "networkPolicy.enabled=true,upstream=http://api:9000,adminToken=a")
	for _, rule := range r.NetworkPolicy.Spec.Ingress {
		if p := rule.Ports[0].Port.String(); p != "http" {
			t.Errorf("port %s opened without peers: %+v", p, rule)
		}
		if len(rule.From) != 0 {
			t.Errorf("http limited without publicFrom: %+v", rule.From)
		}
	}
	for _, set := range []string{
		"networkPolicy.enabled=true,grpcPort=8082",
		"networkPolicy.enabled=true,upstream=http://api:9000,internalToken=i,serviceMonitor.enabled=true",
	} {
		if _, err := helmSet(set); err == nil || !strings.Contains(err.Error(), "networkPolicy.enabled with") {
			t.Errorf("%s: %v; want a refusal (the port would be closed to its only callers)", set, err)
		}
	}
}

// TestHelmChartExistingSecretRefusals: existingSecret with a value the
// chart would put in its own Secret, without keys, or keys without a
// name, is refused with what to set.
func TestHelmChartExistingSecretRefusals(t *testing.T) {
	for _, c := range []struct{ set, want string }{
		{"existingSecret.name=s,existingSecret.adminTokenKey=a,adminToken=x", "put each value in that Secret"},
		{"existingSecret.name=s,existingSecret.storePasswordKey=p,store.password=x", "put each value in that Secret"},
		{"existingSecret.name=s", "no key of it is named"},
		{"existingSecret.internalTokenKey=i", "without existingSecret.name"},
	} {
		if _, err := helmSet(c.set); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v; want %q", c.set, err, c.want)
		}
	}
	// Only the admin token in it: no internal token, no password file.
	r := renderTyped(t, "--set", "existingSecret.name=s,existingSecret.adminTokenKey=admin")
	env := envOf(r.Deployment.Spec.Template.Spec.Containers[0])
	if ref := env["FAIRGATE_ADMIN_TOKEN"].ValueFrom; r.Secret != nil || ref == nil || ref.SecretKeyRef.Name != "s" || env["FAIRGATE_INTERNAL_TOKEN"].Name != "" || strings.Contains(env["FAIRGATE_STORE"].Value, "password_file") {
		t.Errorf("existingSecret with the admin key only: Secret %v, env %v", r.Secret != nil, env)
	}
}

// TestHelmChartEnvoySwap: rls.configMap puts fairgate in
// envoyproxy/ratelimit's place: that service's environment, the ConfigMap
// mounted where RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/config says, no
// fairgate.yaml, gRPC on 8081 on the Service and the admin API moved to
// 8082. The rendered environment, given to fairgate serve's own parser,
// makes a config whose runtime directory is the mount, and which loads
// every domain of the example ConfigMap mounted there as kubelet mounts
// it; the example decodes strictly and each of its files is a domain.
func TestHelmChartEnvoySwap(t *testing.T) {
	r := renderTyped(t, "-f", filepath.Join(chartDir, "ci/rls-values.yaml"))
	if r.ConfigMap != nil {
		t.Error("in envoyproxy/ratelimit's place the chart still renders its fairgate.yaml ConfigMap")
	}
	pod := r.Deployment.Spec.Template.Spec
	c := pod.Containers[0]
	env := envOf(c)
	for name, want := range map[string]string{"RUNTIME_ROOT": "/data", "RUNTIME_SUBDIRECTORY": "ratelimit", "RUNTIME_IGNOREDOTFILES": "true", "RUNTIME_WATCH_ROOT": "false", "GRPC_PORT": "8081", "HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED": "true"} {
		if env[name].Value != want {
			t.Errorf("%s=%q, want %q", name, env[name].Value, want)
		}
	}
	if v, ok := env["FAIRGATE_CONFIG"]; !ok || v.Value != "" {
		t.Error("FAIRGATE_CONFIG is not emptied: the image sets it, and fairgate refuses to start with both it and the runtime directory")
	}
	mount := ""
	for _, m := range c.VolumeMounts {
		for _, v := range pod.Volumes {
			if v.Name == m.Name && v.ConfigMap != nil && v.ConfigMap.Name == "ratelimit-config" {
				mount = m.MountPath
				if m.SubPath != "" {
					t.Error("the ConfigMap is mounted by subPath: Kubernetes never updates a subPath mount")
				}
			}
		}
	}
	if mount != "/data/ratelimit/config" {
		t.Errorf("ConfigMap ratelimit-config mounted at %q, want /data/ratelimit/config", mount)
	}
	ports := map[string]int32{}
	for _, p := range c.Ports {
		ports[p.Name] = p.ContainerPort
	}
	if ports["grpc"] != 8081 || ports["admin"] != 8082 || ports["http"] != 8080 {
		t.Errorf("container ports %v: want grpc 8081 (as envoyproxy/ratelimit), admin 8082, http 8080", ports)
	}
	var svcGRPC int32
	for _, p := range r.Service.Spec.Ports {
		if p.Name == "grpc" {
			svcGRPC = p.Port
		}
	}
	if svcGRPC != 8081 {
		t.Errorf("the Service's gRPC port is %d, want 8081", svcGRPC)
	}

	// The example ConfigMap.
	b, err := os.ReadFile(filepath.Join(chartDir, "examples/ratelimit-configmap.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var cm corev1.ConfigMap
	if err := yaml.UnmarshalStrict(b, &cm); err != nil || cm.Kind != "ConfigMap" || cm.Name != "ratelimit-config" || len(cm.Data) == 0 {
		t.Fatalf("examples/ratelimit-configmap.yaml: %v, %s %q with %d files", err, cm.Kind, cm.Name, len(cm.Data))
	}
	for name, data := range cm.Data {
		if ds, err := config.ParseRLS(name, []byte(data)); err != nil || len(ds) != 1 {
			t.Errorf("examples/ratelimit-configmap.yaml, %s: %v (%d domains)", name, err, len(ds))
		}
	}

	// fairgate serve's own parser, given the rendered environment (the
	// secrets' references left out: they are FAIRGATE_* tokens), with
	// RUNTIME_ROOT moved under a temporary directory that holds the example
	// ConfigMap as kubelet mounts it (links through ..data) at the mount
	// path: the config it makes loads every domain of the ConfigMap.
	root := t.TempDir()
	kubetest.NewVolume(t, filepath.Join(root, mount), cm.Data)
	for _, e := range c.Env {
		if e.ValueFrom == nil {
			v := e.Value
			if e.Name == "RUNTIME_ROOT" {
				v = filepath.Join(root, v)
			}
			t.Setenv(e.Name, v)
		}
	}
	sc, err := app.ParseServe(nil, io.Discard)
	if err != nil {
		t.Fatalf("fairgate serve with the chart's environment: %v", err)
	}
	if sc.Config != "" || !strings.Contains(string(sc.ConfigData), "runtime_dir: "+filepath.Join(root, mount)+"\n") || !strings.Contains(string(sc.ConfigData), "ignore_dot_files: true") {
		t.Errorf("config file %q, config made from the environment:\n%s\nwant runtime_dir %s with dot files ignored", sc.Config, sc.ConfigData, mount)
	}
	if cfg, err := config.Parse("environment", sc.ConfigData); err != nil || len(cfg.RLS.Domains) != len(cm.Data) {
		t.Errorf("the config made from the chart's environment on the mounted example: %v; want its %d domains", err, len(cm.Data))
	}
	if sc.GRPCListen != "0.0.0.0:8081" || sc.AdminListen != "0.0.0.0:8082" || sc.Listen != "0.0.0.0:8080" {
		t.Errorf("listeners: gRPC %s, admin %s, http %s", sc.GRPCListen, sc.AdminListen, sc.Listen)
	}
	if u, err := url.Parse(sc.Store); err != nil || u.Host != "redis:6379" || u.Query().Get("password_file") == "" {
		t.Errorf("store %q", sc.Store)
	}

	for _, c := range []struct{ set, want string }{
		{"rls.configMap=rl,config=headers: x", "rls.configMap and config are both set"},
		{"rls.configMap=rl,upstream=http://api:9000", "rls.configMap and upstream are both set"},
		{"rls.configMap=rl,grpcPort=9000", "leave grpcPort 0"},
	} {
		if _, err := helmSet(c.set); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v; want %q", c.set, err, c.want)
		}
	}
}

// TestHelmChartIngressNginxExample: examples/gateways/ingress-nginx.yaml's
// auth-url names the Service the chart makes when installed as its
// comment says (release fairgate in namespace fairgate), on a port of that
// Service; on main the chart named it fairgate-fairgate.
func TestHelmChartIngressNginxExample(t *testing.T) {
	b, err := os.ReadFile("../../examples/gateways/ingress-nginx.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), "helm install fairgate deploy/helm/fairgate -n fairgate") {
		t.Fatal("ingress-nginx.yaml no longer says how the chart is installed for its auth-url")
	}
	var ing networkingv1.Ingress
	if err := yaml.UnmarshalStrict(b, &ing); err != nil {
		t.Fatal(err)
	}
	u, err := url.Parse(ing.Annotations["nginx.ingress.kubernetes.io/auth-url"])
	if err != nil {
		t.Fatal(err)
	}
	out, err := helmTemplate("fairgate", chartDir, "--namespace", "fairgate")
	if err != nil {
		t.Fatal(err)
	}
	r, err := decodeStrict(out)
	if err != nil {
		t.Fatal(err)
	}
	want := r.Service.Name + ".fairgate.svc.cluster.local"
	port := false
	for _, p := range r.Service.Spec.Ports {
		port = port || fmt.Sprint(p.Port) == u.Port()
	}
	if u.Hostname() != want || !port {
		t.Errorf("the example's auth-url is %s; the chart's Service is %s with ports %v", u.Host, want, r.Service.Spec.Ports)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"api-limits", chartDir}, "api-limits-fairgate"},
		{[]string{"t", chartDir, "--set", "fullnameOverride=limits"}, "limits"},
	} {
		out, err := helmTemplate(c.args...)
		if err != nil {
			t.Fatal(err)
		}
		if r, err := decodeStrict(out); err != nil || r.Service.Name != c.want || r.Deployment.Name != c.want {
			t.Errorf("%v: %v, Service %q: want %q", c.args, err, r.Service.Name, c.want)
		}
	}
}
