package main

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/fairgate/fairgate/internal/testwait"
)

// TestServeDashboardTenantIDs: the limited tenants' IDs on the dashboard
// are behind a credential, as the help of --internal-token-file says.
// With only the internal token set, /dashboard/data refuses a request
// without it and shows the tenants to one with it, and /dashboard/tenant
// a tenant's budget, each layer in its unit; with no token at all, it
// answers without a tenant ID, and no budget.
func TestServeDashboardTenantIDs(t *testing.T) {
	const tenant = "acme-private-customer"
	for _, tok := range []string{"internal-token-for-the-test-01", ""} {
		t.Run("token="+tok, func(t *testing.T) {
			t.Setenv("FAIRGATE_INTERNAL_TOKEN", tok)
			sv := startServe(t, "--listen", "127.0.0.1:0")
			defer sv.stop()
			base := "http://" + sv.addr
			call := func(method, path, body, tok string) (int, string) {
				req, _ := http.NewRequest(method, base+path, strings.NewReader(body))
				if tok != "" {
					req.Header.Set("Authorization", "Bearer "+tok)
				}
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				defer resp.Body.Close()
				b, _ := io.ReadAll(resp.Body)
				return resp.StatusCode, string(b)
			}
			for i := 0; ; i++ {
				if _, body := call("POST", "/v1/check", `{"tenant":"`+tenant+`","class":"write"}`, tok); strings.Contains(body, `"allowed":false`) {
					break
				}
				if i > 1000 {
					t.Fatal("the tenant was never limited")
				}
			}
			data := func(tok string) (int, string) { return call("GET", "/dashboard/data", "", tok) }
			if tok != "" {
				if code, body := data(""); code != http.StatusUnauthorized || strings.Contains(body, tenant) {
					t.Fatalf("without the internal token: %d %s, want 401", code, body)
				}
			}
			// The dashboard samples once a second.
			testwait.EventuallyNil(t, 30*time.Second, fmt.Sprintf("a sample showing what the token %q may see", tok), func() error {
				code, body := data(tok)
				if code != http.StatusOK {
					t.Fatalf("with the token %q: %d %s", tok, code, body)
				}
				if tok == "" && strings.Contains(body, `"tenants_hidden":true`) {
					if strings.Contains(body, tenant) {
						t.Fatalf("without any token the data shows a tenant ID: %s", body)
					}
					return nil
				}
				if tok != "" && strings.Contains(body, tenant) {
					return nil
				}
				return errors.New(body)
			})
			// A tenant's budget: each layer in its unit, with a token only.
			budget := "/dashboard/tenant?id=" + tenant
			if tok == "" {
				if code, body := call("GET", budget, "", ""); code != http.StatusForbidden || strings.Contains(body, tenant) {
					t.Fatalf("a budget without any token: %d %s, want 403", code, body)
				}
				return
			}
			if code, body := call("GET", budget, "", ""); code != http.StatusUnauthorized {
				t.Fatalf("a budget without the internal token: %d %s, want 401", code, body)
			}
			code, body := call("GET", budget, "", tok)
			if code != http.StatusOK || !strings.Contains(body, `"tenant":"`+tenant+`"`) || !strings.Contains(body, `"unit":"requests"`) || !strings.Contains(body, `"remaining":`) {
				t.Fatalf("a budget with the internal token: %d %s, want the tenant's layers in requests", code, body)
			}
		})
	}
}
