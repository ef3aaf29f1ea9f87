package openapitest

import (
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"golang.org/x/text/language"
	"golang.org/x/text/message"
)

var english = message.NewPrinter(language.English)

// schemaErrors lists what err (from a schema's Validate) says is wrong,
// one line per failed keyword, each with the instance's location as a
// JSON path: "$.cost: maximum: got 7, want 5".
func schemaErrors(err error, sep string) string {
	var ve *jsonschema.ValidationError
	if !errors.As(err, &ve) {
		return sep + err.Error()
	}
	var b strings.Builder
	var walk func(e *jsonschema.ValidationError)
	walk = func(e *jsonschema.ValidationError) {
		if len(e.Causes) == 0 {
			fmt.Fprintf(&b, "%s%s: %s", sep, jsonPath(e.InstanceLocation), e.ErrorKind.LocalizedString(english))
		}
		for _, c := range e.Causes {
			walk(c)
		}
	}
	walk(ve)
	return b.String()
}

// jsonPath writes an instance location as a JSON path: $.a[0]['b c'].
func jsonPath(loc []string) string {
	var b strings.Builder
	b.WriteString("$")
	for _, tok := range loc {
		if _, err := strconv.Atoi(tok); err == nil {
			b.WriteString("[" + tok + "]")
		} else if tok != "" && strings.IndexFunc(tok, func(r rune) bool {
			return !(r == '_' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9')
		}) < 0 {
			b.WriteString("." + tok)
		} else {
			b.WriteString("['" + strings.ReplaceAll(tok, "'", `\'`) + "']")
		}
	}
	return b.String()
}

// mediaType returns the entry of content for contentType: the type itself,
// else the most specific range that covers it (type/*+suffix, type/*,
// */subtype, */*).
func mediaType(content map[string]*jsonschema.Schema, contentType string) (string, bool) {
	mt, _, _ := strings.Cut(contentType, ";")
	mt = strings.ToLower(strings.TrimSpace(mt))
	if mt == "" {
		return "", false
	}
	typ, sub, _ := strings.Cut(mt, "/")
	suffix := ""
	if i := strings.LastIndexByte(sub, '+'); i >= 0 {
		suffix = sub[i:]
	}
	best, rank := "", 0
	for k := range content {
		key, _, _ := strings.Cut(k, ";")
		r := 0
		switch strings.ToLower(strings.TrimSpace(key)) {
		case mt:
			r = 5
		case typ + "/*" + suffix:
			r = 4
		case typ + "/*":
			r = 3
		case "*/" + sub:
			r = 2
		case "*/*":
			r = 1
		}
		if r > rank || r == rank && r > 0 && k < best {
			best, rank = k, r
		}
	}
	return best, rank > 0
}

// isJSON reports whether a body of contentType is JSON, which is all the
// checker decodes (other bodies are checked for their type only).
func isJSON(contentType string) bool {
	return strings.Contains(strings.ToLower(contentType), "json")
}

// checkBody checks a JSON body against schema.
func checkBody(what string, schema *jsonschema.Schema, body []byte) []string {
	v, err := jsonBody(body)
	if err != nil {
		return []string{fmt.Sprintf("%s is not JSON: %v", what, err)}
	}
	if err := schema.Validate(v); err != nil {
		return []string{what + " does not match its schema:" + schemaErrors(err, "\n      ")}
	}
	return nil
}

func listed(content map[string]*jsonschema.Schema) string {
	var ks []string
	for k := range content {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return strings.Join(ks, ", ")
}

// check checks a response of r's kind: its content type and body, its
// headers.
func (r *response) check(status int, header http.Header, body []byte) []string {
	var errs []string
	if len(r.content) > 0 {
		ct := header.Get("Content-Type")
		if k, ok := mediaType(r.content, ct); !ok {
			errs = append(errs, fmt.Sprintf("Content-Type %q: the description lists %s for %d", ct, listed(r.content), status))
		} else if s := r.content[k]; s != nil && isJSON(ct) && len(body) > 0 {
			errs = append(errs, checkBody("the body", s, body)...)
		}
	}
	for _, h := range r.headers {
		if strings.EqualFold(h.name, "Content-Type") {
			continue
		}
		vs := header.Values(h.name)
		if len(vs) == 0 {
			if h.required {
				errs = append(errs, fmt.Sprintf("header %s: required, missing", h.name))
			}
			continue
		}
		for _, v := range vs {
			errs = append(errs, h.check([]string{v})...)
		}
	}
	return errs
}

// checkRequest checks a request the server accepted: its parameters, its
// credentials' presence and its body.
func (op *operation) checkRequest(r *http.Request, pathValues map[string]string, contentType string, body []byte) []string {
	var errs []string
	query := r.URL.Query()
	for _, p := range op.params {
		var vs []string
		switch p.in {
		case "path":
			if v, ok := pathValues[p.name]; ok {
				vs = []string{v}
			}
		case "query":
			vs = query[p.name]
		case "header":
			if slices.Contains([]string{"accept", "content-type", "authorization"}, strings.ToLower(p.name)) {
				continue // OpenAPI: such a parameter is ignored
			}
			if v := r.Header.Get(p.name); v != "" {
				vs = []string{v}
			}
		case "cookie":
			if ck, err := r.Cookie(p.name); err == nil {
				vs = []string{ck.Value}
			}
		}
		if len(vs) == 0 {
			if p.required {
				errs = append(errs, fmt.Sprintf("%s parameter %s: required, missing", p.in, p.name))
			}
			continue
		}
		errs = append(errs, p.check(vs)...)
	}
	errs = append(errs, op.checkSecurity(r)...)
	if op.body == nil {
		return errs
	}
	if contentType == "" {
		if op.body.required {
			errs = append(errs, "the body is required: none was sent")
		}
		return errs
	}
	k, ok := mediaType(op.body.content, contentType)
	if !ok {
		return append(errs, fmt.Sprintf("Content-Type %q: the description takes %s", contentType, listed(op.body.content)))
	}
	s := op.body.content[k]
	if s == nil || !isJSON(contentType) {
		return errs
	}
	if len(body) == 0 {
		if op.body.required {
			errs = append(errs, "the body is required: it is empty")
		}
		return errs
	}
	return append(errs, checkBody("the request body", s, body)...)
}

// checkSecurity checks that r carries the credentials one of the
// operation's security alternatives names (their presence and scheme, not
// their worth).
func (op *operation) checkSecurity(r *http.Request) []string {
	if len(op.security) == 0 {
		return nil
	}
	var why []string
	for _, alt := range op.security {
		ok := true
		for _, name := range alt {
			s := op.schemes[name]
			switch strings.ToLower(s.typ) {
			case "http":
				a := r.Header.Get("Authorization")
				if len(a) < len(s.scheme) || !strings.EqualFold(a[:len(s.scheme)], s.scheme) {
					ok = false
					why = append(why, fmt.Sprintf("%s: no Authorization: %s header", name, s.scheme))
				}
			case "apikey":
				var v string
				switch s.in {
				case "header":
					v = r.Header.Get(s.name)
				case "query":
					v = r.URL.Query().Get(s.name)
				case "cookie":
					if ck, err := r.Cookie(s.name); err == nil {
						v = ck.Name
					}
				}
				if v == "" {
					ok = false
					why = append(why, fmt.Sprintf("%s: no %s %s", name, s.in, s.name))
				}
			}
		}
		if ok {
			return nil
		}
	}
	return []string{"no credential the operation's security allows: " + strings.Join(why, "; ")}
}

// check checks a parameter's (or header's) values, read as its schema's
// type says: one value for a scalar; for an array, the values of an
// exploded query parameter, else one value split on the style's
// delimiter.
func (p *param) check(vs []string) []string {
	if p.schema == nil {
		return nil
	}
	what := p.in + " parameter " + p.name
	if p.respHeader {
		what = "header " + p.name
	}
	if slices.Contains(p.types, "json") { // content: the value is a JSON document
		v, err := jsonBody([]byte(vs[0]))
		if err != nil {
			return []string{fmt.Sprintf("%s: %q is not JSON: %v", what, vs[0], err)}
		}
		if err := p.schema.Validate(v); err != nil {
			return []string{fmt.Sprintf("%s: %q does not match its schema:%s", what, vs[0], schemaErrors(err, "\n      "))}
		}
		return nil
	}
	if slices.Contains(p.types, "object") {
		return nil // object-valued parameters (form, deepObject) are not read: presence only
	}
	var readings []any
	if slices.Contains(p.types, "array") {
		items := vs
		if !(p.in == "query" && p.explode) {
			sep := ","
			switch p.style {
			case "spaceDelimited":
				sep = " "
			case "pipeDelimited":
				sep = "|"
			}
			items = strings.Split(vs[0], sep)
		}
		arr := make([]any, len(items))
		for i, it := range items {
			arr[i] = it
			if rs := scalar(strings.TrimSpace(it), p.itemTypes); len(rs) > 0 {
				arr[i] = rs[0]
			}
		}
		readings = append(readings, arr)
	}
	var errs []string
	for _, v := range vs {
		rs := slices.Concat(readings, scalar(v, p.types))
		if len(rs) == 0 {
			errs = append(errs, fmt.Sprintf("%s: %q is not of type %s", what, v, strings.Join(p.types, " or ")))
			continue
		}
		var first error
		for _, x := range rs {
			err := p.schema.Validate(x)
			if err == nil {
				first = nil
				break
			}
			if first == nil {
				first = err
			}
		}
		if len(readings) > 0 { // an array is one reading of all the values
			if first != nil {
				errs = append(errs, fmt.Sprintf("%s: %q does not match its schema:%s", what, strings.Join(vs, ", "), schemaErrors(first, "\n      ")))
			}
			break
		}
		if first != nil {
			errs = append(errs, fmt.Sprintf("%s: %q does not match its schema:%s", what, v, schemaErrors(first, "\n      ")))
		}
	}
	return errs
}

// scalar returns the readings of v as types say (a string as it is when
// types is empty or has string).
func scalar(v string, types []string) []any {
	var out []any
	if len(types) == 0 {
		return []any{v}
	}
	for _, t := range types {
		switch t {
		case "integer":
			if n, ok := new(big.Int).SetString(v, 10); ok {
				out = append(out, json.Number(n.String()))
			}
		case "number":
			if f, err := strconv.ParseFloat(v, 64); err == nil {
				out = append(out, json.Number(strconv.FormatFloat(f, 'g', -1, 64)))
			}
		case "boolean":
			if b, err := strconv.ParseBool(v); err == nil {
				out = append(out, b)
			}
		case "string":
			out = append(out, v)
		case "null":
			if v == "" {
				out = append(out, nil)
			}
		}
	}
	return out
}
