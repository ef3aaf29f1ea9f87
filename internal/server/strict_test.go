package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"
)

// walkNames is strictNames as a walk over encoding/json's tokens: slower,
// and plainly right, the oracle FuzzStrictNames checks the byte scanner
// against.
func walkNames(dec *json.Decoder, t reflect.Type, path string) error {
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	tok, err := dec.Token()
	if err != nil {
		return err
	}
	d, ok := tok.(json.Delim)
	if !ok {
		return nil
	}
	switch d {
	case '[':
		var elem reflect.Type
		if t != nil && (t.Kind() == reflect.Slice || t.Kind() == reflect.Array) {
			elem = t.Elem()
		}
		for dec.More() {
			if err := walkNames(dec, elem, path+"[]"); err != nil {
				return err
			}
		}
	case '{':
		seen := map[string]bool{}
		for dec.More() {
			kt, err := dec.Token()
			if err != nil {
				return err
			}
			name, _ := kt.(string)
			if seen[name] {
				return fmt.Errorf("field %s%s: given twice", path, name)
			}
			seen[name] = true
			var ft reflect.Type
			switch {
			case t == nil:
			case t.Kind() == reflect.Map:
				ft = t.Elem()
			case t.Kind() == reflect.Struct:
				for i := range t.NumField() {
					tag, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ",")
					if tag == name {
						ft = t.Field(i).Type
						break
					}
					if strings.EqualFold(tag, name) {
						return fmt.Errorf("field %s%s: unknown field; names are case-sensitive: did you mean %q?", path, name, tag)
					}
				}
			}
			if err := walkNames(dec, ft, path+name+"."); err != nil {
				return err
			}
		}
	}
	_, err = dec.Token()
	return err
}

func oracleNames(body []byte, t reflect.Type) error {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	err := walkNames(dec, t, "")
	var syn *json.SyntaxError
	if errors.As(err, &syn) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return nil
	}
	return err
}

// FuzzStrictNames: on every body that is valid JSON in UTF-8 (readJSON
// refuses any other before it looks at names), the byte scanner
// finds exactly the name problems the token walk finds.
func FuzzStrictNames(f *testing.F) {
	for _, b := range []string{
		`{"key":"k","limit":1,"period_ms":1000}`, `{"key":"k","key":"j"}`, `{"Limit":1}`,
		`{"limits":{"1m":{"limit":5,"Limit":6}}}`, `{"rules":[{"limit":1},{"limit":2,"limit":3}]}`,
		`{"k\u0065y":"x","key":"y"}`, `[1, {"a":1,"a":2}]`, `{"plan":"t","shares":{"a":1,"a":2}}`, `{}`, `[]`,
	} {
		f.Add(b)
	}
	types := []reflect.Type{reflect.TypeOf(&takeBody{}), reflect.TypeOf(&checkBody{}), reflect.TypeOf(&tenantBody{}), reflect.TypeOf(&planBody{})}
	f.Fuzz(func(t *testing.T, body string) {
		if !json.Valid([]byte(body)) || !utf8.ValidString(body) {
			return
		}
		for _, typ := range types {
			got, want := strictNames([]byte(body), typ), oracleNames([]byte(body), typ)
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Fatalf("%s into %v: scanner %v, token walk %v", body, typ, got, want)
			}
		}
	})
}

func BenchmarkStrictNames(b *testing.B) {
	body := []byte(`{"key":"acme:search","limit":120,"period_ms":60000,"burst":30}`)
	t := reflect.TypeOf(&takeBody{})
	for b.Loop() {
		if err := strictNames(body, t); err != nil {
			b.Fatal(err)
		}
	}
}

// TestHeaderFields: /v1/check's headers encode as the JSON object a map
// of them would, whatever bytes a value holds.
func TestHeaderFields(t *testing.T) {
	h := headerFields{"RateLimit", `"free";r=5;t=10`, "Retry-After", "3", "X-Odd", "a\\b\x01\"<&>"}
	b, err := json.Marshal(struct {
		H headerFields `json:"h"`
	}{h})
	if err != nil {
		t.Fatal(err)
	}
	var got struct{ H map[string]string }
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatalf("%s: %v", b, err)
	}
	want := map[string]string{"RateLimit": `"free";r=5;t=10`, "Retry-After": "3", "X-Odd": "a\\b\x01\"<&>"}
	if !maps.Equal(got.H, want) {
		t.Errorf("decoded %v from %s, want %v", got.H, b, want)
	}
}

// strictNames is strictBody's name checks alone (names given twice or in
// the wrong case), what the fuzz target compares with walkNames.
func strictNames(body []byte, t reflect.Type) error {
	_, _, err := scanBody(body, t)
	return err
}

// TestScanDuplicateAmongMany: a name given twice is found among many
// names, past the scanner's first 16 (where it keeps a set).
func TestScanDuplicateAmongMany(t *testing.T) {
	for _, c := range []struct {
		names []string
		dup   bool
	}{
		{[]string{"a", "b", "c"}, false},
		{[]string{"a", "b", "a"}, true},
		{append(seq(40), "n3"), true},
		{append(seq(40), "n39"), true},
		{seq(40), false},
	} {
		var body strings.Builder
		body.WriteByte('{')
		for i, n := range c.names {
			if i > 0 {
				body.WriteByte(',')
			}
			fmt.Fprintf(&body, "%q:0", n)
		}
		body.WriteByte('}')
		_, ok, err := scanBody([]byte(body.String()), nil)
		if got := err != nil && strings.Contains(err.Error(), "given twice"); got != c.dup || (!c.dup && !ok) {
			t.Errorf("%d names, duplicate %v: ok %v, %v", len(c.names), c.dup, ok, err)
		}
	}
}

func seq(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("n%d", i)
	}
	return out
}
