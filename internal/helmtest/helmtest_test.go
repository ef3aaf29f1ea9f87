package helmtest

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func TestParseSet(t *testing.T) {
	for _, c := range []struct {
		in   string
		want map[string]any
	}{
		{"a=b", map[string]any{"a": "b"}},
		{"a.b=1,c=true,d=null,e=007", map[string]any{"a": map[string]any{"b": int64(1)}, "c": true, "d": nil, "e": "007"}},
		{"l[1].n=x", map[string]any{"l": []any{nil, map[string]any{"n": "x"}}}},
		{`a=x\,y,b\.c=d=e`, map[string]any{"a": "x,y", "b.c": "d=e"}},
		{"config=headers: x", map[string]any{"config": "headers: x"}},
	} {
		got := map[string]any{}
		if err := ParseSet(c.in, got); err != nil || !reflect.DeepEqual(got, c.want) {
			t.Errorf("ParseSet(%q) = %#v, %v; want %#v", c.in, got, err, c.want)
		}
	}
	for _, bad := range []string{"a", "a[x]=1", "a]=1"} {
		if err := ParseSet(bad, map[string]any{}); err == nil {
			t.Errorf("ParseSet(%q): no error", bad)
		}
	}
}

func TestCoalesce(t *testing.T) {
	defaults := map[string]any{"a": map[string]any{"x": 1.0, "y": 2.0}, "b": "keep", "c": "drop"}
	got := Coalesce(map[string]any{"a": map[string]any{"y": int64(3)}, "c": nil}, defaults)
	want := map[string]any{"a": map[string]any{"x": 1.0, "y": int64(3)}, "b": "keep"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Coalesce = %#v; want %#v", got, want)
	}
	if _, ok := defaults["a"].(map[string]any)["y"].(float64); !ok {
		t.Error("Coalesce changed the defaults")
	}
}

// chart writes a chart named demo with the given templates.
func chart(t *testing.T, meta string, templates map[string]string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "demo")
	os.MkdirAll(filepath.Join(dir, "templates"), 0o755)
	os.WriteFile(filepath.Join(dir, "Chart.yaml"), []byte(meta), 0o644)
	os.WriteFile(filepath.Join(dir, "values.yaml"), []byte("name: demo\nport: 80\nlist: [a, b]\n"), 0o644)
	for name, text := range templates {
		os.WriteFile(filepath.Join(dir, "templates", name), []byte(text), 0o644)
	}
	return dir
}

const meta = "apiVersion: v2\nname: demo\ndescription: d\nversion: 0.1.0\nkubeVersion: \">=1.30.0-0\"\n"

func TestTemplate(t *testing.T) {
	dir := chart(t, meta, map[string]string{
		"_helpers.tpl": `{{- define "demo.name" -}}{{ .Release.Name }}-{{ .Values.name }}{{- end }}`,
		"svc.yaml":     "apiVersion: v1\nkind: Service\nmetadata:\n  name: {{ include \"demo.name\" . }}\nspec:\n  ports:\n    {{- toYaml .Values.list | nindent 4 }}\n  port: {{ .Values.port }}\n  missing: {{ .Values.nothing }}\n  kube: {{ .Capabilities.KubeVersion.Minor }}\n",
		"NOTES.txt":    "notes",
	})
	out, err := Template("r", dir, "--set", "port=81")
	if err != nil {
		t.Fatal(err)
	}
	want := "---\n# Source: demo/templates/svc.yaml\napiVersion: v1\nkind: Service\nmetadata:\n  name: r-demo\nspec:\n  ports:\n    - a\n    - b\n  port: 81\n  missing: \n  kube: 35\n\n"
	if out != want {
		t.Errorf("Template =\n%q\nwant\n%q", out, want)
	}
	if _, err := Template("r", dir, "--kube-version", "1.29.0"); err == nil || !strings.Contains(err.Error(), "kubeVersion") {
		t.Errorf("Kubernetes 1.29 against >=1.30: %v; want the chart's kubeVersion to refuse it", err)
	}
	if _, err := Template("r", dir, "--post-renderer", "x"); err == nil || !strings.Contains(err.Error(), "--post-renderer") {
		t.Errorf("unknown flag: %v", err)
	}
}

func TestTemplateErrors(t *testing.T) {
	for _, c := range []struct{ text, want string }{
		{`{{ lookup "v1" "Secret" "ns" "n" }}`, `function "lookup" not defined`},
		{`{{ env "HOME" }}`, `function "env" not defined`},
		{`{{ fail "set networkPolicy.enabled with upstream" }}`, "set networkPolicy.enabled with upstream"},
		{`{{ required "name is required" .Values.nothing }}`, "name is required"},
	} {
		dir := chart(t, meta, map[string]string{"a.yaml": c.text})
		if _, err := Template("r", dir); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v; want %q", c.text, err, c.want)
		}
	}
}

func TestLint(t *testing.T) {
	good := "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {{ .Release.Name }}\n"
	for _, c := range []struct {
		meta      string
		templates map[string]string
		want      string // "" for a clean lint
	}{
		{meta, map[string]string{"cm.yaml": good}, ""},
		{strings.Replace(meta, "0.1.0", "abc", 1), map[string]string{"cm.yaml": good}, "not a semantic version"},
		{strings.Replace(meta, "v2", "v1", 1), map[string]string{"cm.yaml": good}, "want v2"},
		{strings.Replace(meta, "name: demo", "name: other", 1), map[string]string{"cm.yaml": good}, "directory's name"},
		{meta, map[string]string{"cm.yaml": good + "x: [\n"}, "not valid YAML"},
		{meta, map[string]string{"cm.yaml": "kind: ConfigMap\nmetadata:\n  name: a\n"}, "without apiVersion"},
		{meta, map[string]string{"svc.yaml": "apiVersion: v1\nkind: Service\nmetadata:\n  name: 1abc\n"}, "DNS-1035"},
		{meta, map[string]string{"cm.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: Upper_Case\n"}, "DNS-1123"},
		{meta, map[string]string{"cm.json": good}, "file extension"},
	} {
		got := strings.Join(Lint(chart(t, c.meta, c.templates)), "; ")
		if (c.want == "") != (got == "") || !strings.Contains(got, c.want) {
			t.Errorf("%v: lint %q; want %q", c.templates, got, c.want)
		}
	}
}
