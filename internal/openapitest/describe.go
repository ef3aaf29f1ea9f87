package openapitest

import (
	"bytes"
	_ "embed"
	"fmt"
	"maps"
	"net/url"
	"slices"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// oas31Schema is the OpenAPI Initiative's JSON Schema of an OpenAPI 3.1
// document (https://spec.openapis.org/oas/3.1/schema/2022-10-07, Apache
// License 2.0): New checks the description against it, as the validator
// this package used before did.
//
//go:embed oas31-schema.json
var oas31Schema []byte

// docURL names the description as a JSON Schema resource: every schema is
// compiled from it by JSON pointer, so that its $refs resolve in place.
const docURL = "urn:fairgate:openapi.json"

// methods are the operations a path item may have.
var methods = []string{"get", "put", "post", "delete", "options", "head", "patch", "trace"}

// operation is what the checker reads of one operation, its $refs resolved
// and its schemas compiled.
type operation struct {
	params    []*param
	body      *requestBody          // nil: the operation takes no body
	security  [][]string            // alternatives, each the schemes all required; nil or an empty one: none
	responses map[string]*response  // "200", "2XX", "default"
	schemes   map[string]*secScheme // the document's, by name
}

// param is a parameter (or a response header, In "header").
type param struct {
	name, in, style string
	required        bool
	explode         bool
	respHeader      bool               // a response's header, not a request's parameter
	schema          *jsonschema.Schema // nil: any value
	types           []string           // the schema's types; for array, itemTypes is its items'
	itemTypes       []string
}

type requestBody struct {
	required bool
	content  map[string]*jsonschema.Schema // media type (range) -> schema, nil: any
}

type response struct {
	content map[string]*jsonschema.Schema
	headers []*param
}

type secScheme struct{ typ, scheme, in, name string }

// loader reads the description: its $refs and its schemas, gathering
// what is wrong with it.
type loader struct {
	doc      any // as jsonschema.UnmarshalJSON decodes it (numbers as json.Number)
	c        *jsonschema.Compiler
	compiled map[string]*jsonschema.Schema
	errs     []string
}

func (l *loader) fail(format string, args ...any) {
	if msg := fmt.Sprintf(format, args...); !slices.Contains(l.errs, msg) {
		l.errs = append(l.errs, msg)
	}
}

// lookup returns the value at the JSON pointer ptr ("" is the document).
func (l *loader) lookup(ptr string) (any, bool) {
	v := l.doc
	if ptr == "" {
		return v, true
	}
	if !strings.HasPrefix(ptr, "/") {
		return nil, false
	}
	for _, tok := range strings.Split(ptr[1:], "/") {
		tok = strings.NewReplacer("~1", "/", "~0", "~").Replace(tok)
		switch x := v.(type) {
		case map[string]any:
			var ok bool
			if v, ok = x[tok]; !ok {
				return nil, false
			}
		case []any:
			i := -1
			fmt.Sscan(tok, &i)
			if i < 0 || i >= len(x) || fmt.Sprint(i) != tok {
				return nil, false
			}
			v = x[i]
		default:
			return nil, false
		}
	}
	return v, true
}

// refPointer returns the JSON pointer a local $ref ("#/...") names.
func refPointer(ref string) (string, error) {
	frag, ok := strings.CutPrefix(ref, "#")
	if !ok {
		return "", fmt.Errorf("$ref %q: only references inside the document (#/...) are supported", ref)
	}
	p, err := url.PathUnescape(frag)
	if err != nil {
		return "", fmt.Errorf("$ref %q: %v", ref, err)
	}
	return p, nil
}

// object returns the object at ptr with its $ref chain followed, and the
// pointer where it was found; what is wrong is recorded, and nil returned.
func (l *loader) object(ptr string) (map[string]any, string) {
	seen := map[string]bool{}
	for {
		v, ok := l.lookup(ptr)
		if !ok {
			l.fail("%s: no such location", ptr)
			return nil, ""
		}
		m, ok := v.(map[string]any)
		if !ok {
			l.fail("%s: not an object", ptr)
			return nil, ""
		}
		ref, ok := m["$ref"].(string)
		if !ok {
			return m, ptr
		}
		if seen[ptr] {
			l.fail("%s: a $ref loop", ptr)
			return nil, ""
		}
		seen[ptr] = true
		next, err := refPointer(ref)
		if err != nil {
			l.fail("%s: %v", ptr, err)
			return nil, ""
		}
		if _, ok := l.lookup(next); !ok {
			l.fail("%s: $ref %q does not resolve", ptr, ref)
			return nil, ""
		}
		ptr = next
	}
}

// escape makes s one token of a JSON pointer.
func escape(s string) string { return strings.NewReplacer("~", "~0", "/", "~1").Replace(s) }

// schema compiles the schema at ptr (Draft 2020-12, OpenAPI 3.1's dialect;
// keywords it does not know, such as example or discriminator, are
// annotations).
func (l *loader) schema(ptr string) *jsonschema.Schema {
	if s, ok := l.compiled[ptr]; ok {
		return s
	}
	var frag strings.Builder
	for i, tok := range strings.Split(ptr, "/") {
		if i > 0 {
			frag.WriteByte('/')
		}
		frag.WriteString(url.PathEscape(tok))
	}
	s, err := l.c.Compile(docURL + "#" + frag.String())
	if err != nil {
		l.fail("%s: the schema does not compile: %v", ptr, err)
	}
	l.compiled[ptr] = s
	return s
}

// types returns the schema's types at ptr (following $refs), and its
// items' types when it is an array.
func (l *loader) types(ptr string) (types, items []string) {
	m, at := l.object(ptr)
	if m == nil {
		return nil, nil
	}
	switch t := m["type"].(type) {
	case string:
		types = []string{t}
	case []any:
		for _, x := range t {
			if s, ok := x.(string); ok {
				types = append(types, s)
			}
		}
	}
	if slices.Contains(types, "array") {
		if _, ok := m["items"].(map[string]any); ok {
			items, _ = l.types(at + "/items")
		}
	}
	return types, items
}

// param reads the parameter (or header, with in "header" and name given)
// at ptr.
func (l *loader) param(ptr, in, name string) *param {
	m, at := l.object(ptr)
	if m == nil {
		return nil
	}
	p := &param{name: name, in: in, respHeader: name != ""}
	if in == "" {
		p.name, _ = m["name"].(string)
		p.in, _ = m["in"].(string)
	}
	p.required, _ = m["required"].(bool)
	p.style, _ = m["style"].(string)
	if p.style == "" {
		p.style = map[string]string{"query": "form", "cookie": "form", "path": "simple", "header": "simple"}[p.in]
	}
	p.explode = p.style == "form"
	if e, ok := m["explode"].(bool); ok {
		p.explode = e
	}
	if _, ok := m["schema"]; ok {
		p.schema = l.schema(at + "/schema")
		p.types, p.itemTypes = l.types(at + "/schema")
	} else if c, ok := m["content"].(map[string]any); ok {
		for mt := range c { // a parameter's content has one media type
			if _, ok := c[mt].(map[string]any)["schema"]; ok {
				p.schema = l.schema(at + "/content/" + escape(mt) + "/schema")
				p.types = []string{"json"}
			}
		}
	}
	return p
}

// content compiles the schemas of a content map at ptr.
func (l *loader) content(ptr string, m map[string]any) map[string]*jsonschema.Schema {
	c, _ := m["content"].(map[string]any)
	out := map[string]*jsonschema.Schema{}
	for mt, v := range c {
		out[mt] = nil
		if mo, ok := v.(map[string]any); ok {
			if _, ok := mo["schema"]; ok {
				out[mt] = l.schema(ptr + "/content/" + escape(mt) + "/schema")
			}
		}
	}
	return out
}

// refsResolve records every local $ref in v (at ptr) that names nothing.
func (l *loader) refsResolve(v any, ptr string) {
	switch x := v.(type) {
	case map[string]any:
		if ref, ok := x["$ref"].(string); ok {
			if p, err := refPointer(ref); err != nil {
				l.fail("%s: %v", ptr, err)
			} else if _, ok := l.lookup(p); !ok {
				l.fail("%s: $ref %q does not resolve", ptr, ref)
			}
		}
		for _, k := range slices.Sorted(maps.Keys(x)) {
			l.refsResolve(x[k], ptr+"/"+escape(k))
		}
	case []any:
		for i, e := range x {
			l.refsResolve(e, fmt.Sprintf("%s/%d", ptr, i))
		}
	}
}

// load reads raw: the operations by path template and method, or what is
// wrong with the description.
func load(raw []byte) (map[string]map[string]*operation, error) {
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		return nil, fmt.Errorf("openapitest: docs/openapi.json: %w", err)
	}
	if err := validDocument(doc); err != nil {
		return nil, err
	}
	l := &loader{doc: doc, c: jsonschema.NewCompiler(), compiled: map[string]*jsonschema.Schema{}}
	l.c.DefaultDraft(jsonschema.Draft2020)
	if err := l.c.AddResource(docURL, doc); err != nil {
		return nil, fmt.Errorf("openapitest: docs/openapi.json: %w", err)
	}
	l.refsResolve(doc, "")
	root := doc.(map[string]any) // validDocument: an object
	schemes := map[string]*secScheme{}
	comps, _ := root["components"].(map[string]any)
	if ss, ok := comps["securitySchemes"].(map[string]any); ok {
		for _, name := range slices.Sorted(maps.Keys(ss)) {
			if m, _ := l.object("/components/securitySchemes/" + escape(name)); m != nil {
				s := &secScheme{}
				s.typ, _ = m["type"].(string)
				s.scheme, _ = m["scheme"].(string)
				s.in, _ = m["in"].(string)
				s.name, _ = m["name"].(string)
				schemes[name] = s
			}
		}
	}
	if cs, ok := comps["schemas"].(map[string]any); ok { // every schema compiles, used or not
		for _, name := range slices.Sorted(maps.Keys(cs)) {
			l.schema("/components/schemas/" + escape(name))
		}
	}
	topSecurity := l.security(root["security"], "/security", schemes)
	ops := map[string]map[string]*operation{}
	paths, _ := root["paths"].(map[string]any)
	for _, tmpl := range slices.Sorted(maps.Keys(paths)) {
		itemPtr := "/paths/" + escape(tmpl)
		item, itemPtr := l.object(itemPtr)
		if item == nil {
			continue
		}
		ops[tmpl] = map[string]*operation{}
		shared := l.params(item, itemPtr)
		for _, m := range methods {
			om, ok := item[m].(map[string]any)
			if !ok {
				continue
			}
			opPtr := itemPtr + "/" + m
			op := &operation{responses: map[string]*response{}, schemes: schemes, security: topSecurity}
			own := l.params(om, opPtr)
			op.params = append(op.params, own...)
			for _, p := range shared {
				if !slices.ContainsFunc(own, func(q *param) bool { return q.name == p.name && q.in == p.in }) {
					op.params = append(op.params, p)
				}
			}
			for _, p := range op.params {
				if p.in == "path" && !strings.Contains(tmpl, "{"+p.name+"}") {
					l.fail("%s: path parameter %q is not in the path", opPtr, p.name)
				}
			}
			if sec, ok := om["security"]; ok {
				op.security = l.security(sec, opPtr+"/security", schemes)
			}
			if _, ok := om["requestBody"]; ok {
				if bm, at := l.object(opPtr + "/requestBody"); bm != nil {
					op.body = &requestBody{content: l.content(at, bm)}
					op.body.required, _ = bm["required"].(bool)
				}
			}
			rs, _ := om["responses"].(map[string]any)
			for _, code := range slices.Sorted(maps.Keys(rs)) {
				rm, at := l.object(opPtr + "/responses/" + escape(code))
				if rm == nil {
					continue
				}
				r := &response{content: l.content(at, rm)}
				hs, _ := rm["headers"].(map[string]any)
				for _, name := range slices.Sorted(maps.Keys(hs)) {
					if h := l.param(at+"/headers/"+escape(name), "header", name); h != nil {
						r.headers = append(r.headers, h)
					}
				}
				op.responses[strings.ToUpper(code)] = r
			}
			ops[tmpl][strings.ToUpper(m)] = op
		}
	}
	if len(l.errs) > 0 {
		return nil, fmt.Errorf("openapitest: docs/openapi.json is not a valid OpenAPI document:\n  %s", strings.Join(l.errs, "\n  "))
	}
	return ops, nil
}

// params reads the parameters of a path item or operation m at ptr.
func (l *loader) params(m map[string]any, ptr string) []*param {
	ps, _ := m["parameters"].([]any)
	var out []*param
	for i := range ps {
		if p := l.param(fmt.Sprintf("%s/parameters/%d", ptr, i), "", ""); p != nil {
			out = append(out, p)
		}
	}
	return out
}

// security reads a list of security requirements.
func (l *loader) security(v any, ptr string, schemes map[string]*secScheme) [][]string {
	reqs, _ := v.([]any)
	out := [][]string{}
	for i, r := range reqs {
		rm, _ := r.(map[string]any)
		names := slices.Sorted(maps.Keys(rm))
		for _, n := range names {
			if schemes[n] == nil {
				l.fail("%s/%d: security scheme %q is not in components/securitySchemes", ptr, i, n)
			}
		}
		out = append(out, names)
	}
	if v == nil {
		return nil
	}
	return out
}

// validDocument checks doc against the OpenAPI 3.1 document schema.
func validDocument(doc any) error {
	c := jsonschema.NewCompiler()
	meta, err := jsonschema.UnmarshalJSON(bytes.NewReader(oas31Schema))
	if err != nil {
		return err
	}
	const u = "https://spec.openapis.org/oas/3.1/schema/2022-10-07"
	if err := c.AddResource(u, meta); err != nil {
		return err
	}
	s, err := c.Compile(u)
	if err != nil {
		return err
	}
	if err := s.Validate(doc); err != nil {
		return fmt.Errorf("openapitest: docs/openapi.json is not a valid OpenAPI document:%s", schemaErrors(err, "\n  "))
	}
	return nil
}

// jsonBody decodes a JSON body as the schemas want it (numbers as
// json.Number), refusing anything after the value.
func jsonBody(b []byte) (any, error) {
	return jsonschema.UnmarshalJSON(bytes.NewReader(b))
}
