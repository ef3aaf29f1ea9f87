package openapitest_test

import (
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/fairgate/fairgate/internal/openapitest"
)

// itemsDoc is a small description with what the checker reads: path,
// query and header parameters, a required request body, security, response
// bodies, headers and content types, and $refs to components.
const itemsDoc = `{
  "openapi": "3.1.0",
  "info": {"title": "items", "version": "1"},
  "paths": {
    "/items/{id}": {
      "parameters": [{"name": "id", "in": "path", "required": true, "schema": {"type": "integer", "minimum": 1}}],
      "get": {
        "responses": {
          "200": {
            "description": "the item",
            "headers": {"X-Version": {"required": true, "schema": {"type": "integer"}}},
            "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Item"}}}
          },
          "404": {"$ref": "#/components/responses/NotFound"}
        }
      }
    },
    "/items": {
      "post": {
        "security": [{"apiKey": []}],
        "parameters": [
          {"name": "X-Tenant", "in": "header", "required": true, "schema": {"type": "string", "minLength": 2}},
          {"name": "limit", "in": "query", "schema": {"type": "integer", "maximum": 10}},
          {"name": "tags", "in": "query", "schema": {"type": "array", "items": {"type": "string", "enum": ["a", "b"]}}}
        ],
        "requestBody": {"required": true, "content": {"application/json": {"schema": {
          "type": "object", "required": ["name"], "additionalProperties": false, "example": {"name": "x"},
          "properties": {"name": {"type": "string", "maxLength": 5}, "size": {"type": "integer"}}
        }}}},
        "responses": {
          "201": {
            "description": "made",
            "headers": {"Location": {"required": true, "schema": {"type": "string"}}},
            "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Item"}}}
          },
          "400": {"$ref": "#/components/responses/NotFound"}
        }
      }
    }
  },
  "components": {
    "schemas": {
      "Item": {
        "type": "object", "required": ["id", "name"], "additionalProperties": false,
        "properties": {"id": {"type": "integer"}, "name": {"type": "string"}}
      },
      "Problem": {"type": "object", "required": ["title"], "properties": {"title": {"type": "string"}}}
    },
    "responses": {
      "NotFound": {"description": "no such item", "content": {"application/problem+json": {"schema": {"$ref": "#/components/schemas/Problem"}}}}
    },
    "securitySchemes": {"apiKey": {"type": "apiKey", "in": "header", "name": "X-API-Key"}}
  }
}`

// exchange is one request and its answer.
type exchange struct {
	method, target string
	header         map[string]string // of the request
	body           string
	status         int
	respHeader     map[string]string
	respBody       string
}

func (x exchange) check(c *openapitest.Checker) {
	r := httptest.NewRequest(x.method, x.target, strings.NewReader(x.body))
	for k, v := range x.header {
		r.Header.Set(k, v)
	}
	h := http.Header{}
	for k, v := range x.respHeader {
		h.Set(k, v)
	}
	c.Check(r, []byte(x.body), x.status, h, []byte(x.respBody))
}

var (
	okGet    = map[string]string{"Content-Type": "application/json", "X-Version": "3"}
	okMade   = map[string]string{"Content-Type": "application/json", "Location": "/items/1"}
	problem  = map[string]string{"Content-Type": "application/problem+json"}
	okPost   = map[string]string{"X-API-Key": "k", "X-Tenant": "acme", "Content-Type": "application/json"}
	item     = `{"id":1,"name":"a"}`
	problem1 = `{"title":"no"}`
)

func without(m map[string]string, key string) map[string]string {
	out := map[string]string{}
	for k, v := range m {
		if k != key {
			out[k] = v
		}
	}
	return out
}

// TestCheck: exchanges the description allows pass; each kind of drift is
// reported (want is a part of the problem).
func TestCheck(t *testing.T) {
	for _, x := range []struct {
		name string
		exchange
		want string // "": no problem
	}{
		{"get", exchange{"GET", "/items/1", nil, "", 200, okGet, item}, ""},
		{"head, no body", exchange{"HEAD", "/items/1", nil, "", 200, okGet, ""}, ""},
		{"a documented error", exchange{"GET", "/items/9", nil, "", 404, problem, problem1}, ""},
		{"post", exchange{"POST", "/items?limit=10&tags=a&tags=b", okPost, `{"name":"abc","size":2}`, 201, okMade, item}, ""},
		{"a body without Content-Type is read as JSON", exchange{"POST", "/items", without(okPost, "Content-Type"), `{"name":"abc"}`, 201, okMade, item}, ""},
		{"a refused request is not the description's to allow", exchange{"POST", "/items?limit=99", map[string]string{}, `{"name":7}`, 400, problem, problem1}, ""},
		{"an undocumented path answered 404", exchange{"GET", "/nope", nil, "", 404, nil, "not found"}, ""},
		{"an undocumented method answered 405", exchange{"DELETE", "/items/1", nil, "", 405, nil, ""}, ""},

		{"an undocumented status", exchange{"GET", "/items/1", nil, "", 500, problem, problem1}, "answered 500, which GET /items/{id} does not list"},
		{"a body of the wrong type", exchange{"GET", "/items/1", nil, "", 200, okGet, `{"id":"one","name":"a"}`}, "response is not what GET /items/{id} documents"},
		{"an undocumented field", exchange{"GET", "/items/1", nil, "", 200, okGet, `{"id":1,"name":"a","secret":1}`}, "'secret'"},
		{"a required field missing", exchange{"GET", "/items/1", nil, "", 200, okGet, `{"id":1}`}, "response is not what GET /items/{id} documents"},
		{"an undocumented content type", exchange{"GET", "/items/1", nil, "", 200, map[string]string{"Content-Type": "text/plain", "X-Version": "3"}, item}, "response is not what GET /items/{id} documents"},
		{"an error body not of its schema", exchange{"GET", "/items/9", nil, "", 404, problem, `{"title":5}`}, "response is not what GET /items/{id} documents"},
		{"a required response header missing", exchange{"GET", "/items/1", nil, "", 200, without(okGet, "X-Version"), item}, "response is not what GET /items/{id} documents"},
		{"a response header not of its type", exchange{"GET", "/items/1", nil, "", 200, map[string]string{"Content-Type": "application/json", "X-Version": "three"}, item}, "response is not what GET /items/{id} documents"},
		{"a path parameter not of its type", exchange{"GET", "/items/one", nil, "", 200, okGet, item}, "accepted a request GET /items/{id} does not allow"},
		{"a path parameter out of range", exchange{"GET", "/items/0", nil, "", 200, okGet, item}, "accepted a request GET /items/{id} does not allow"},
		{"an accepted body violating the request schema", exchange{"POST", "/items", okPost, `{"name":"toolong"}`, 201, okMade, item}, "accepted a request POST /items does not allow"},
		{"an accepted body with an undocumented field", exchange{"POST", "/items", okPost, `{"name":"a","colour":"red"}`, 201, okMade, item}, "accepted a request POST /items does not allow"},
		{"an accepted request without its required body", exchange{"POST", "/items", okPost, "", 201, okMade, item}, "accepted a request POST /items does not allow"},
		{"an accepted body that is not JSON", exchange{"POST", "/items", okPost, `{"name":`, 201, okMade, item}, "accepted a request POST /items does not allow"},
		{"an accepted body of an undocumented content type", exchange{"POST", "/items", map[string]string{"X-API-Key": "k", "X-Tenant": "acme", "Content-Type": "text/plain"}, `{"name":"a"}`, 201, okMade, item}, "accepted a request POST /items does not allow"},
		{"an accepted request without its required header", exchange{"POST", "/items", without(okPost, "X-Tenant"), `{"name":"a"}`, 201, okMade, item}, "accepted a request POST /items does not allow"},
		{"an accepted header parameter violating its schema", exchange{"POST", "/items", map[string]string{"X-API-Key": "k", "X-Tenant": "a", "Content-Type": "application/json"}, `{"name":"a"}`, 201, okMade, item}, "accepted a request POST /items does not allow"},
		{"an accepted query parameter not of its type", exchange{"POST", "/items?limit=ten", okPost, `{"name":"a"}`, 201, okMade, item}, "accepted a request POST /items does not allow"},
		{"an accepted query parameter out of range", exchange{"POST", "/items?limit=11", okPost, `{"name":"a"}`, 201, okMade, item}, "accepted a request POST /items does not allow"},
		{"an accepted query array item not of its enum", exchange{"POST", "/items?tags=a&tags=c", okPost, `{"name":"a"}`, 201, okMade, item}, "accepted a request POST /items does not allow"},
		{"an accepted request without its credential", exchange{"POST", "/items", without(okPost, "X-API-Key"), `{"name":"a"}`, 201, okMade, item}, "accepted a request POST /items does not allow"},
		{"an undocumented path answered 200", exchange{"GET", "/nope", nil, "", 200, nil, "hi"}, "GET /nope: answered 200, but the description has no such operation"},
		{"an undocumented method answered 200", exchange{"DELETE", "/items/1", nil, "", 200, nil, ""}, "DELETE /items/1: answered 200, but the description has no such operation"},
	} {
		t.Run(x.name, func(t *testing.T) {
			c, err := openapitest.NewFrom([]byte(itemsDoc))
			if err != nil {
				t.Fatal(err)
			}
			x.check(c)
			got := strings.Join(c.Problems(), "\n")
			switch {
			case x.want == "" && got != "":
				t.Errorf("%s %s → %d: reported\n%s\nwant no problem", x.method, x.target, x.status, got)
			case x.want != "" && !strings.Contains(got, x.want):
				t.Errorf("%s %s → %d: reported %q, want a problem with %q", x.method, x.target, x.status, got, x.want)
			}
		})
	}
}

// TestChecked: exchanges are counted by operation and status; an
// operation no exchange reached with a 2xx answer is unexercised; a
// problem seen again is reported once with its count.
func TestChecked(t *testing.T) {
	c, err := openapitest.NewFrom([]byte(itemsDoc))
	if err != nil {
		t.Fatal(err)
	}
	for _, x := range []exchange{
		{"GET", "/items/1", nil, "", 200, okGet, item},
		{"GET", "/items/2", nil, "", 200, okGet, item},
		{"GET", "/items/9", nil, "", 404, problem, problem1},
		{"POST", "/items", nil, "", 400, problem, problem1},
		{"GET", "/nope", nil, "", 404, nil, ""}, // no operation: not counted
		{"GET", "/items/1", nil, "", 500, nil, ""},
		{"GET", "/items/1", nil, "", 500, nil, ""},
	} {
		x.check(c)
	}
	if n, ops, sts := c.Checked(); n != 6 || ops != 2 || sts != 4 {
		t.Errorf("Checked() = %d exchanges, %d operations, %d statuses; want 6, 2, 4", n, ops, sts)
	}
	if got, want := c.Unexercised(), []string{"POST /items"}; !slices.Equal(got, want) {
		t.Errorf("Unexercised() = %q, want %q", got, want)
	}
	if p := c.Problems(); len(p) != 1 || !strings.HasPrefix(p[0], "(2 times) GET /items/1: answered 500") {
		t.Errorf("Problems() = %q, want the 500 once, seen 2 times", p)
	}
}

// TestNewFrom: a description that is not a valid OpenAPI 3.1 document, or
// whose $refs or schemas are broken, is refused.
func TestNewFrom(t *testing.T) {
	for _, x := range []struct{ name, from, to string }{
		{"not JSON", `"openapi": "3.1.0",`, `"openapi": 3.1.0,`},
		{"no info", `"info": {"title": "items", "version": "1"},`, ``},
		{"not 3.1", `"openapi": "3.1.0"`, `"openapi": "2.0"`},
		{"a $ref to no schema", `"$ref": "#/components/schemas/Item"}}}`, `"$ref": "#/components/schemas/Nothing"}}}`},
		{"a $ref to no response", `"$ref": "#/components/responses/NotFound"}`, `"$ref": "#/components/responses/Gone"}`},
		{"a schema that does not compile", `"maxLength": 5`, `"maxLength": "five"`},
		{"a response that is not an object", `"404": {"$ref": "#/components/responses/NotFound"}`, `"404": 7`},
	} {
		t.Run(x.name, func(t *testing.T) {
			if !strings.Contains(itemsDoc, x.from) {
				t.Fatalf("itemsDoc has no %q", x.from)
			}
			if _, err := openapitest.NewFrom([]byte(strings.Replace(itemsDoc, x.from, x.to, 1))); err == nil {
				t.Error("NewFrom took it")
			} else {
				t.Log(err)
			}
		})
	}
}
