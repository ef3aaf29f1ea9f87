package jsonwire

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"testing"
	"unicode/utf8"
)

// read returns the members of b as "name=s:value" or "name=i:value", and
// whether b was simple.
func read(b []byte) ([]string, bool) {
	o := NewObject(b)
	var got []string
	for m, ok := o.Next(); ok; m, ok = o.Next() {
		switch m.Kind {
		case String:
			got = append(got, fmt.Sprintf("%s=s:%s", m.Name, m.Str))
		case Int:
			got = append(got, fmt.Sprintf("%s=i:%d", m.Name, m.Int))
		}
	}
	return got, o.Simple()
}

// oracle reads b with encoding/json's tokenizer, as read does, for a body
// read accepted.
func oracle(b []byte) ([]string, error) {
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	if t, err := d.Token(); err != nil || t != json.Delim('{') {
		return nil, fmt.Errorf("not an object: %v %v", t, err)
	}
	var got []string
	for d.More() {
		name, err := d.Token()
		if err != nil {
			return nil, err
		}
		v, err := d.Token()
		if err != nil {
			return nil, err
		}
		switch v := v.(type) {
		case string:
			got = append(got, fmt.Sprintf("%s=s:%s", name, v))
		case json.Number:
			n, err := strconv.ParseInt(string(v), 10, 64)
			if err != nil {
				return nil, err
			}
			got = append(got, fmt.Sprintf("%s=i:%d", name, n))
		default:
			return nil, fmt.Errorf("value %v", v)
		}
	}
	if _, err := d.Token(); err != nil {
		return nil, err
	}
	if _, err := d.Token(); err != io.EOF {
		return nil, fmt.Errorf("more after the object: %v", err)
	}
	return got, nil
}

func TestObject(t *testing.T) {
	for _, tc := range []struct {
		in     string
		simple bool
		want   string
	}{
		{`{"key":"k1","limit":10,"period_ms":3600000}`, true, `[key=s:k1 limit=i:10 period_ms=i:3600000]`},
		{" \n{ \"a\" : -5 , \"b\":\"x y\" }\t", true, `[a=i:-5 b=s:x y]`},
		{`{}`, true, `[]`},
		{`{"a":0}`, true, `[a=i:0]`},
		{`{"a":"é"}`, true, `[a=s:é]`},
		{`{"a":999999999999999999}`, true, `[a=i:999999999999999999]`},
		{`{"a":1}{}`, false, ``},
		{`{"a":1} x`, false, ``},
		{`{"a":1e3}`, false, ``},
		{`{"a":1.5}`, false, ``},
		{`{"a":01}`, false, ``},
		{`{"a":-}`, false, ``},
		{`{"a":1000000000000000000}`, false, ``}, // 19 digits: left to encoding/json
		{`{"a":"x\"y"}`, false, ``},
		{`{"a\u0062":1}`, false, ``},
		{`{"a":null}`, false, ``},
		{`{"a":true}`, false, ``},
		{`{"a":{}}`, false, ``},
		{`{"a":[1]}`, false, ``},
		{`{"a":1,}`, false, ``},
		{`{,"a":1}`, false, ``},
		{`{"a" 1}`, false, ``},
		{`{"a":1`, false, ``},
		{`{"a":"x`, false, ``},
		{"{\"a\":\"\x01\"}", false, ``},
		{`[]`, false, ``},
		{``, false, ``},
		{`"x"`, false, ``},
	} {
		got, simple := read([]byte(tc.in))
		if simple != tc.simple || (simple && fmt.Sprint(got) != tc.want) {
			t.Errorf("read(%q) = %v, simple %v; want %s, simple %v", tc.in, got, simple, tc.want, tc.simple)
		}
	}
}

// FuzzObject: whatever Object reads as simple, encoding/json reads as one
// object with the same members and values, in the same order.
func FuzzObject(f *testing.F) {
	for _, s := range []string{`{"key":"k1","limit":10}`, `{"a":-0}`, `{"a":"x","a":"y"}`, ` {} `, `{"a":1e3}`, `{"a":"\u00e9"}`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if !utf8.ValidString(s) {
			return // the caller refuses it before
		}
		got, simple := read([]byte(s))
		if !simple {
			return
		}
		want, err := oracle([]byte(s))
		if err != nil {
			t.Fatalf("%q read as simple %v, but encoding/json: %v", s, got, err)
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("%q: read %v, encoding/json %v", s, got, want)
		}
	})
}

// FuzzAppendString: AppendString writes what encoding/json writes.
func FuzzAppendString(f *testing.F) {
	for _, s := range []string{"", "acme", `a"b\c`, "<&>", "\x00\x1f", "é", "\xff", "\u2028", "plain.tenant.1h"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		want, _ := json.Marshal(s)
		if got := AppendString([]byte("x"), s); string(got) != "x"+string(want) {
			t.Fatalf("AppendString(%q) = %s, want x%s", s, got, want)
		}
	})
}

func TestAppendMember(t *testing.T) {
	b := []byte("{")
	b = AppendInt(AppendMember(b, "a"), -3)
	b = AppendBool(AppendMember(b, "b"), true)
	b = AppendString(AppendMember(b, "c"), "<x>")
	b = append(b, '}')
	var got map[string]any
	if err := json.Unmarshal(b, &got); err != nil || fmt.Sprint(got) != "map[a:-3 b:true c:<x>]" {
		t.Fatalf("%s: %v %v", b, got, err)
	}
}

func BenchmarkObject(b *testing.B) {
	body := []byte(`{"key":"k12345","limit":1000000000,"period_ms":3600000}`)
	b.ReportAllocs()
	for b.Loop() {
		o := NewObject(body)
		for _, ok := o.Next(); ok; _, ok = o.Next() {
		}
		if !o.Simple() {
			b.Fatal("not simple")
		}
	}
}
