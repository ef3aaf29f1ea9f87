package pertenant_test

import (
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"

	"github.com/fairgate/fairgate/algo"
	"github.com/fairgate/fairgate/httplimit/pertenant"
	"github.com/fairgate/fairgate/policy"
)

// tenantOf stands for your verified authentication: here an API key
// looked up in a table, never a header the client could set freely.
func tenantOf(r *http.Request) (policy.Identity, error) {
	switch r.Header.Get("X-API-Key") {
	case "key-acme":
		return policy.Identity{Tenant: "acme"}, nil
	case "key-globex":
		return policy.Identity{Tenant: "globex"}, nil
	case "":
		return policy.Identity{}, nil
	}
	return policy.Identity{}, errors.New("unknown API key")
}

func get(h http.Handler, key string) *httptest.ResponseRecorder {
	r := httptest.NewRequest("GET", "/v1/users/1", nil)
	r.Header.Set("X-API-Key", key)
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

// The three lines: every tenant gets 2 requests a minute on its own.
func ExampleWrap() {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/users/{id}", func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "ok") })

	h, err := pertenant.Wrap(mux, pertenant.Config{Limit: algo.PerMinute(2), Identify: tenantOf})
	if err != nil {
		panic(err)
	}
	// log.Fatal(http.ListenAndServe(":8080", h))

	for _, key := range []string{"key-acme", "key-acme", "key-acme", "key-globex", "", "key-nobody"} {
		w := get(h, key)
		fmt.Printf("%q: %d remaining=%q\n", key, w.Code, w.Header().Get("RateLimit-Remaining"))
	}
	// Output:
	// "key-acme": 200 remaining="1"
	// "key-acme": 200 remaining="0"
	// "key-acme": 429 remaining="0"
	// "key-globex": 200 remaining="1"
	// "": 401 remaining=""
	// "key-nobody": 401 remaining=""
}

// The policy from the daemon's config file: plans, classes and routes.
func ExampleWrap_file() {
	dir, err := os.MkdirTemp("", "pertenant")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	file := filepath.Join(dir, "fairgate.yaml")
	if err := os.WriteFile(file, []byte(`
default_plan: free
default_class: read
plans:
  free: {limit: 60, period: 1m, burst: 2}
classes:
  read: {}
`), 0o600); err != nil {
		panic(err)
	}

	h, err := pertenant.Wrap(http.NotFoundHandler(), pertenant.Config{File: file, Identify: tenantOf})
	if err != nil {
		panic(err) // every problem of the file, each with its line
	}
	for range 3 {
		w := get(h, "key-acme")
		fmt.Println(w.Code, w.Header().Get("RateLimit-Limit"), w.Header().Get("RateLimit-Remaining"))
	}
	// Output:
	// 404 2 1
	// 404 2 0
	// 429 2 0
}
