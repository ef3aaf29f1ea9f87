package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path"
	"sort"
	"strings"
	"testing"

	"helm.sh/helm/v4/pkg/chart/common"
	"helm.sh/helm/v4/pkg/chart/common/util"
	"helm.sh/helm/v4/pkg/chart/v2/lint"
	"helm.sh/helm/v4/pkg/chart/v2/lint/support"
	"helm.sh/helm/v4/pkg/chart/v2/loader"
	chartutil "helm.sh/helm/v4/pkg/chart/v2/util"
	"helm.sh/helm/v4/pkg/engine"
	"helm.sh/helm/v4/pkg/strvals"
	"sigs.k8s.io/yaml"
)

// helmTemplate is `helm template` for the arguments the chart tests use:
// the release name and the chart's directory, then --set (comma-joined
// assignments, as strvals parses them), -f (a values file), --namespace
// and --kube-version. It renders with Helm's own packages (chart loader,
// values coalescing and schema validation, the template engine, the
// kubeVersion check), as helm template does client-side, so that the
// tests build no helm binary. Its output is the manifests in file order,
// each under "---" and "# Source:", NOTES.txt and empty files left out.
func helmTemplate(args ...string) (string, error) {
	var pos []string
	vals := map[string]any{}
	var sets []string
	ns, kube := "default", ""
	for i := 0; i < len(args); i++ {
		flag := args[i]
		if !strings.HasPrefix(flag, "-") {
			pos = append(pos, flag)
			continue
		}
		if i+1 == len(args) {
			return "", fmt.Errorf("helm template: %s needs a value", flag)
		}
		i++
		switch v := args[i]; flag {
		case "--set":
			sets = append(sets, v)
		case "-f", "--values":
			b, err := os.ReadFile(v)
			if err != nil {
				return "", err
			}
			file := map[string]any{}
			if err := yaml.Unmarshal(b, &file); err != nil {
				return "", fmt.Errorf("helm template: %s: %w", v, err)
			}
			vals = mergeValues(vals, file)
		case "--namespace", "-n":
			ns = v
		case "--kube-version":
			kube = v
		default:
			return "", fmt.Errorf("helm template: the test renderer does not know %s", flag)
		}
	}
	if len(pos) != 2 {
		return "", fmt.Errorf("helm template: want a release name and a chart, got %q", pos)
	}
	for _, s := range sets {
		if err := strvals.ParseInto(s, vals); err != nil {
			return "", fmt.Errorf("helm template: --set %s: %w", s, err)
		}
	}
	ch, err := loader.Load(pos[1])
	if err != nil {
		return "", err
	}
	caps := common.DefaultCapabilities.Copy()
	if kube == "" {
		// helm template's default: the Kubernetes of the client-go it
		// is built with (v0.37 is 1.37), which go.mod names. Helm's own
		// default in a test binary is 1.20.
		mod, err := os.ReadFile("../../go.mod")
		if err != nil {
			return "", err
		}
		_, rest, ok := strings.Cut(string(mod), "k8s.io/client-go v0.")
		minor, _, _ := strings.Cut(rest, ".")
		if !ok || minor == "" {
			return "", errors.New("helm template: go.mod names no k8s.io/client-go v0.x")
		}
		kube = "1." + minor + ".0"
	}
	v, err := common.ParseKubeVersion(kube)
	if err != nil {
		return "", err
	}
	caps.KubeVersion = *v
	if ch.Metadata.KubeVersion != "" && !chartutil.IsCompatibleRange(ch.Metadata.KubeVersion, caps.KubeVersion.String()) {
		return "", fmt.Errorf("chart requires kubeVersion: %s which is incompatible with Kubernetes %s", ch.Metadata.KubeVersion, caps.KubeVersion.Version)
	}
	top, err := util.ToRenderValuesWithSchemaValidation(ch, vals, common.ReleaseOptions{Name: pos[0], Namespace: ns, Revision: 1, IsInstall: true}, caps, false)
	if err != nil {
		return "", err
	}
	var e engine.Engine
	files, err := e.RenderWithContext(context.Background(), ch, top)
	if err != nil {
		return "", errors.New("helm template: " + err.Error())
	}
	names := make([]string, 0, len(files))
	for name := range files {
		names = append(names, name)
	}
	sort.Strings(names)
	var out strings.Builder
	for _, name := range names {
		body := files[name]
		if strings.HasSuffix(name, "NOTES.txt") || strings.HasPrefix(path.Base(name), "_") || strings.TrimSpace(body) == "" {
			continue
		}
		fmt.Fprintf(&out, "---\n# Source: %s\n%s\n", name, body)
	}
	return out.String(), nil
}

// mergeValues merges src into dst as helm merges values files: maps key
// by key, anything else replaced.
func mergeValues(dst, src map[string]any) map[string]any {
	for k, v := range src {
		if m, ok := v.(map[string]any); ok {
			if d, ok := dst[k].(map[string]any); ok {
				dst[k] = mergeValues(d, m)
				continue
			}
		}
		dst[k] = v
	}
	return dst
}

// helmLint is `helm lint --strict` on the chart in dir: Helm's linter,
// failing the test on any warning or error.
func helmLint(t *testing.T, dir string) {
	t.Helper()
	l := lint.RunAll(dir, map[string]any{}, "default")
	for _, m := range l.Messages {
		if m.Severity > support.InfoSev {
			t.Errorf("helm lint --strict: %s", m)
		}
	}
}
