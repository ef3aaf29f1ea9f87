package helmtest

import (
	"fmt"
	"path"
	"regexp"
	"slices"
	"strings"

	"github.com/Masterminds/semver/v3"
	"sigs.k8s.io/yaml"
)

var (
	dns1123Label     = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)
	dns1123Subdomain = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`)
	dns1035Label     = regexp.MustCompile(`^[a-z]([-a-z0-9]*[a-z0-9])?$`)
	docSep           = regexp.MustCompile(`(?m)^---\s*$`)
)

// Lint is `helm lint --strict` on the chart in dir, for the checks Helm's
// linter makes on a chart like this one, every finding an error: Chart.yaml
// (apiVersion v2, a name that is the directory's, a semantic version, a
// valid kubeVersion range, a known type), values.yaml a map, templates
// with known extensions that render with the chart's defaults, and each
// rendered object valid YAML with an apiVersion, a kind and a name
// Kubernetes accepts for that kind. It returns the findings.
func Lint(dir string) []string {
	var out []string
	bad := func(format string, args ...any) { out = append(out, fmt.Sprintf(format, args...)) }
	c, err := Load(dir)
	if err != nil {
		return []string{err.Error()}
	}
	m := c.Meta
	if m.APIVersion != "v2" {
		bad("Chart.yaml: apiVersion %q: want v2", m.APIVersion)
	}
	if m.Name == "" || m.Name != path.Base(strings.TrimSuffix(dir, "/")) {
		bad("Chart.yaml: name %q must be the chart directory's name", m.Name)
	}
	if _, err := semver.StrictNewVersion(m.Version); err != nil {
		bad("Chart.yaml: version %q is not a semantic version: %v", m.Version, err)
	}
	if m.KubeVersion != "" {
		if _, err := semver.NewConstraint(m.KubeVersion); err != nil {
			bad("Chart.yaml: kubeVersion %q: %v", m.KubeVersion, err)
		}
	}
	if m.Type != "" && m.Type != "application" && m.Type != "library" {
		bad("Chart.yaml: type %q: want application or library", m.Type)
	}
	if m.Description == "" {
		bad("Chart.yaml: no description")
	}
	if len(c.Templates) == 0 {
		bad("templates/: no templates")
	}
	for name := range c.Templates {
		if ext := path.Ext(name); ext != ".yaml" && ext != ".yml" && ext != ".tpl" && ext != ".txt" {
			bad("%s: file extension %q: want .yaml, .yml, .tpl or .txt", name, ext)
		}
	}
	files, err := c.Render(Release{Name: "test-release", Namespace: "default", Revision: 1, IsInstall: true}, nil, "", false)
	if err != nil {
		return append(out, err.Error())
	}
	for _, name := range slices.Sorted(func(yield func(string) bool) {
		for k := range files {
			if !yield(k) {
				return
			}
		}
	}) {
		if path.Ext(name) != ".yaml" && path.Ext(name) != ".yml" {
			continue
		}
		for _, doc := range docSep.Split(files[name], -1) {
			if strings.TrimSpace(doc) == "" {
				continue
			}
			var obj struct {
				APIVersion string `json:"apiVersion"`
				Kind       string `json:"kind"`
				Metadata   struct {
					Name string `json:"name"`
				} `json:"metadata"`
			}
			if err := yaml.Unmarshal([]byte(doc), &obj); err != nil {
				bad("%s: not valid YAML: %v", name, err)
				continue
			}
			if obj.APIVersion == "" || obj.Kind == "" {
				bad("%s: an object without apiVersion or kind", name)
				continue
			}
			if msg := checkName(obj.Kind, obj.Metadata.Name); msg != "" {
				bad("%s: %s %q: %s", name, obj.Kind, obj.Metadata.Name, msg)
			}
		}
	}
	return out
}

// checkName says what is wrong with name for an object of kind, as the
// API server validates it: a Service's name is a DNS-1035 label, most
// names a DNS-1123 subdomain.
func checkName(kind, name string) string {
	switch {
	case name == "":
		return "no metadata.name"
	case kind == "Service":
		if len(name) > 63 || !dns1035Label.MatchString(name) {
			return "a Service's name must be a DNS-1035 label (lower case letters, digits and '-', starting with a letter, at most 63)"
		}
	case kind == "Namespace":
		if len(name) > 63 || !dns1123Label.MatchString(name) {
			return "a Namespace's name must be a DNS-1123 label"
		}
	default:
		if len(name) > 253 || !dns1123Subdomain.MatchString(name) {
			return "a name must be a DNS-1123 subdomain (lower case letters, digits, '-' and '.', at most 253)"
		}
	}
	return ""
}
