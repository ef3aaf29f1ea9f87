// Package helmtest renders and lints a Helm chart for tests, as `helm
// template` and `helm lint` do client-side, so that chart tests build
// neither Helm nor a Kubernetes client: Go's text/template with sprig (the
// function library Helm's engine is made of) plus Helm's own functions
// (include, required, toYaml, fromYaml, toJson, fromJson), values coalesced
// as Helm coalesces them, --set parsed as Helm's strvals parses it, and the
// chart's kubeVersion range checked. A template calling a function this
// package does not define fails to parse, naming the function, so a chart
// cannot silently depend on more of Helm than is rendered here.
package helmtest

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"text/template"

	"github.com/Masterminds/semver/v3"
	"github.com/Masterminds/sprig/v3"
	"sigs.k8s.io/yaml"
)

// DefaultKubeVersion stands in for helm template's default Kubernetes
// version (that of the client Helm is built with) when a render names
// none.
const DefaultKubeVersion = "1.35.0"

// Metadata is the part of Chart.yaml a chart's templates and the lint
// read, under the names templates use (.Chart.Name, .Chart.AppVersion).
type Metadata struct {
	APIVersion  string `json:"apiVersion"`
	Name        string `json:"name"`
	Version     string `json:"version"`
	AppVersion  string `json:"appVersion"`
	KubeVersion string `json:"kubeVersion"`
	Description string `json:"description"`
	Type        string `json:"type"`
	Home        string `json:"home"`
	Icon        string `json:"icon"`
}

// Values is a render's values (.Values in a template).
type Values map[string]any

// AsMap returns v as a plain map (.Values.AsMap, for sprig's dig).
func (v Values) AsMap() map[string]any { return v }

// Files is a chart's files outside templates/ (.Files in a template).
type Files map[string][]byte

// Get returns the file at name, relative to the chart's directory, or ""
// (.Files.Get).
func (f Files) Get(name string) string { return string(f[name]) }

// Chart is a chart directory, loaded.
type Chart struct {
	Dir       string
	Meta      Metadata
	Values    map[string]any    // values.yaml
	Templates map[string]string // "<chart>/templates/<file>" -> text
	Files     Files
}

// Load reads the chart in dir: Chart.yaml, values.yaml, templates/ and the
// other files.
func Load(dir string) (*Chart, error) {
	c := &Chart{Dir: dir, Values: map[string]any{}, Templates: map[string]string{}, Files: Files{}}
	raw, err := os.ReadFile(filepath.Join(dir, "Chart.yaml"))
	if err != nil {
		return nil, fmt.Errorf("helmtest: %w", err)
	}
	if err := yaml.UnmarshalStrict(raw, &c.Meta); err != nil {
		return nil, fmt.Errorf("helmtest: %s: %w", filepath.Join(dir, "Chart.yaml"), err)
	}
	if raw, err := os.ReadFile(filepath.Join(dir, "values.yaml")); err == nil {
		if err := yaml.Unmarshal(raw, &c.Values); err != nil {
			return nil, fmt.Errorf("helmtest: %s: %w", filepath.Join(dir, "values.yaml"), err)
		}
		if c.Values == nil {
			c.Values = map[string]any{}
		}
	}
	err = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		rel = filepath.ToSlash(rel)
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		switch {
		case strings.HasPrefix(rel, "templates/"):
			c.Templates[c.Meta.Name+"/"+rel] = string(b)
		case rel != "Chart.yaml" && rel != "values.yaml" && rel != ".helmignore":
			c.Files[rel] = b
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("helmtest: %w", err)
	}
	return c, nil
}

// Release is what a render is for (.Release in a template).
type Release struct {
	Name      string
	Namespace string
	Revision  int
	IsInstall bool
	IsUpgrade bool
	Service   string
}

// Render renders every template of c with values (the user's, coalesced
// over values.yaml) for Kubernetes kube (DefaultKubeVersion when empty),
// and returns the output of each file by name. strict makes a missing
// value an error, as helm lint --strict renders.
func (c *Chart) Render(rel Release, values map[string]any, kube string, strict bool) (map[string]string, error) {
	if kube == "" {
		kube = DefaultKubeVersion
	}
	kv, err := semver.NewVersion(kube)
	if err != nil {
		return nil, fmt.Errorf("helmtest: kube version %q: %w", kube, err)
	}
	if c.Meta.KubeVersion != "" {
		con, err := semver.NewConstraint(c.Meta.KubeVersion)
		if err != nil {
			return nil, fmt.Errorf("helmtest: Chart.yaml kubeVersion %q: %w", c.Meta.KubeVersion, err)
		}
		if !con.Check(kv) {
			return nil, fmt.Errorf("chart requires kubeVersion: %s which is incompatible with Kubernetes v%s", c.Meta.KubeVersion, kv)
		}
	}
	vals := Coalesce(deepCopy(values), c.Values)
	rel.Service = "Helm"
	top := map[string]any{
		"Values":  Values(vals),
		"Release": rel,
		"Chart":   c.Meta,
		"Files":   c.Files,
		"Capabilities": map[string]any{
			"KubeVersion": map[string]any{"Version": "v" + kv.String(), "Major": strconv.FormatUint(kv.Major(), 10), "Minor": strconv.FormatUint(kv.Minor(), 10)},
		},
	}

	t := template.New("gotpl")
	if strict {
		t.Option("missingkey=error")
	} else {
		t.Option("missingkey=zero")
	}
	t.Funcs(funcMap(t))
	names := slices.Sorted(maps.Keys(c.Templates))
	for _, name := range names {
		if _, err := t.New(name).Parse(c.Templates[name]); err != nil {
			return nil, fmt.Errorf("parse error at (%s): %w", name, err)
		}
	}
	out := map[string]string{}
	for _, name := range names {
		if strings.HasPrefix(path.Base(name), "_") {
			continue
		}
		data := maps.Clone(top)
		data["Template"] = map[string]any{"Name": name, "BasePath": c.Meta.Name + "/templates"}
		var b strings.Builder
		if err := t.ExecuteTemplate(&b, name, data); err != nil {
			return nil, fmt.Errorf("render error in %q: %w", name, err)
		}
		out[name] = strings.ReplaceAll(b.String(), "<no value>", "")
	}
	return out, nil
}

// funcMap is sprig's text functions less env and expandenv (as Helm
// removes them) plus Helm's own; include and tpl run templates of t.
func funcMap(t *template.Template) template.FuncMap {
	f := sprig.TxtFuncMap()
	delete(f, "env")
	delete(f, "expandenv")
	f["include"] = func(name string, data any) (string, error) {
		var b strings.Builder
		err := t.ExecuteTemplate(&b, name, data)
		return b.String(), err
	}
	f["required"] = func(msg string, v any) (any, error) {
		if v == nil || v == "" {
			return nil, errors.New(msg)
		}
		return v, nil
	}
	f["toYaml"] = func(v any) string {
		b, err := yaml.Marshal(v)
		if err != nil {
			return ""
		}
		return strings.TrimSuffix(string(b), "\n")
	}
	f["fromYaml"] = func(s string) map[string]any {
		m := map[string]any{}
		if err := yaml.Unmarshal([]byte(s), &m); err != nil {
			m["Error"] = err.Error()
		}
		return m
	}
	f["toJson"] = func(v any) string {
		b, err := json.Marshal(v)
		if err != nil {
			return ""
		}
		return string(b)
	}
	f["fromJson"] = func(s string) map[string]any {
		m := map[string]any{}
		if err := json.Unmarshal([]byte(s), &m); err != nil {
			m["Error"] = err.Error()
		}
		return m
	}
	return f
}

// Coalesce merges the chart's defaults under the user's values as Helm
// does: maps key by key, a user's value replacing a default, and a user's
// null deleting the key. It changes and returns user.
func Coalesce(user, defaults map[string]any) map[string]any {
	if user == nil {
		user = map[string]any{}
	}
	for k, dv := range defaults {
		uv, ok := user[k]
		switch {
		case !ok:
			if m, isMap := dv.(map[string]any); isMap {
				user[k] = Coalesce(nil, m)
			} else {
				user[k] = dv
			}
		case uv == nil:
			delete(user, k)
		default:
			um, uIsMap := uv.(map[string]any)
			dm, dIsMap := dv.(map[string]any)
			if uIsMap && dIsMap {
				user[k] = Coalesce(um, dm)
			}
		}
	}
	return user
}

func deepCopy(m map[string]any) map[string]any {
	out := make(map[string]any, len(m))
	for k, v := range m {
		switch x := v.(type) {
		case map[string]any:
			out[k] = deepCopy(x)
		case []any:
			out[k] = slices.Clone(x)
		default:
			out[k] = v
		}
	}
	return out
}

// Template is `helm template` for the arguments chart tests use: a
// release name and a chart directory, then --set (comma-joined
// assignments), -f/--values (a values file), --namespace/-n and
// --kube-version. Its output is the manifests in file order, each under
// "---" and "# Source:", NOTES.txt and empty files left out.
func Template(args ...string) (string, error) {
	var pos, sets []string
	vals := map[string]any{}
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
			return "", fmt.Errorf("helm template: helmtest does not know %s", flag)
		}
	}
	if len(pos) != 2 {
		return "", fmt.Errorf("helm template: want a release name and a chart, got %q", pos)
	}
	for _, s := range sets {
		if err := ParseSet(s, vals); err != nil {
			return "", fmt.Errorf("helm template: --set %s: %w", s, err)
		}
	}
	ch, err := Load(pos[1])
	if err != nil {
		return "", err
	}
	files, err := ch.Render(Release{Name: pos[0], Namespace: ns, Revision: 1, IsInstall: true}, vals, kube, false)
	if err != nil {
		return "", errors.New("helm template: " + err.Error())
	}
	var out strings.Builder
	for _, name := range slices.Sorted(maps.Keys(files)) {
		body := files[name]
		if strings.HasSuffix(name, "NOTES.txt") || strings.TrimSpace(body) == "" {
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

var setKey = regexp.MustCompile(`^([^\[\]]+)(?:\[(\d+)\])?$`)

// ParseSet applies one --set argument (a=b,c.d=e,f[0].g=h) to vals as
// Helm's strvals does: dotted keys make maps, name[i] makes lists, and a
// value of true, false, null or an integer is typed, anything else a
// string; a backslash escapes a comma, dot or equals sign.
func ParseSet(s string, vals map[string]any) error {
	for _, assign := range splitUnescaped(s, ',') {
		if assign == "" {
			continue
		}
		kv := splitUnescaped(assign, '=')
		if len(kv) < 2 {
			return fmt.Errorf("key %q has no value", assign)
		}
		key, val := kv[0], strings.Join(kv[1:], "=")
		if err := setPath(vals, splitUnescaped(key, '.'), typed(unescape(val))); err != nil {
			return fmt.Errorf("%s: %w", key, err)
		}
	}
	return nil
}

func setPath(m map[string]any, keys []string, v any) error {
	k := unescape(keys[0])
	g := setKey.FindStringSubmatch(k)
	if g == nil {
		return fmt.Errorf("bad key %q", k)
	}
	name := g[1]
	if g[2] == "" {
		if len(keys) == 1 {
			m[name] = v
			return nil
		}
		child, _ := m[name].(map[string]any)
		if child == nil {
			child = map[string]any{}
			m[name] = child
		}
		return setPath(child, keys[1:], v)
	}
	i, _ := strconv.Atoi(g[2])
	list, _ := m[name].([]any)
	for len(list) <= i {
		list = append(list, nil)
	}
	if len(keys) == 1 {
		list[i] = v
	} else {
		child, _ := list[i].(map[string]any)
		if child == nil {
			child = map[string]any{}
		}
		if err := setPath(child, keys[1:], v); err != nil {
			return err
		}
		list[i] = child
	}
	m[name] = list
	return nil
}

func typed(s string) any {
	switch s {
	case "true":
		return true
	case "false":
		return false
	case "null":
		return nil
	}
	if len(s) > 1 && s[0] == '0' {
		return s
	}
	if n, err := strconv.ParseInt(s, 10, 64); err == nil {
		return n
	}
	return s
}

// splitUnescaped splits s at each sep not preceded by a backslash,
// keeping the escapes (unescape removes them).
func splitUnescaped(s string, sep byte) []string {
	var parts []string
	start := 0
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '\\':
			i++
		case sep:
			parts = append(parts, s[start:i])
			start = i + 1
		}
	}
	return append(parts, s[start:])
}

func unescape(s string) string {
	var b bytes.Buffer
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+1 < len(s) {
			i++
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
