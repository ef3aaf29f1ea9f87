package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fairgate/fairgate/internal/redistest"
	"github.com/fairgate/fairgate/internal/testwait"
)

// docACLArgs returns the ACL SETUSER line of docs/redis.md as arguments,
// with the password given.
func docACLArgs(t *testing.T, password string) []string {
	t.Helper()
	doc := string(mustRead(t, "../../docs/redis.md"))
	_, rest, _ := strings.Cut(doc, "<!-- acl -->\n```\n")
	line, _, _ := strings.Cut(rest, "\n```")
	args := strings.Fields(strings.ReplaceAll(line, ">PASSWORD", ">"+password))
	if len(args) < 5 || args[0] != "ACL" {
		t.Fatalf("no ACL line in docs/redis.md: %q", line)
	}
	return args
}

// TestServeAsACLUser: `fairgate serve` on a Redis as the least-privilege
// user of docs/redis.md makes, lists and revokes API keys through the
// admin API and decides requests, with no NOPERM in its log (on main the
// key sync failed on HSCAN and POST /admin/keys answered 503).
func TestServeAsACLUser(t *testing.T) {
	redistest.Need(t)
	srv, err := redistest.Start()
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	if _, err := redistest.Do(srv.Addr, docACLArgs(t, "acl-serve-password")...); err != nil {
		t.Fatal(err)
	}
	const admin = "admin-token-for-the-test-0001"
	t.Setenv("FAIRGATE_ADMIN_TOKEN", admin)
	adminAddr := freeAddr(t)
	sv := startServe(t, "--listen", "127.0.0.1:0", "--admin-listen", adminAddr, "--store", "redis://fairgate:acl-serve-password@"+srv.Addr)
	defer sv.stop()
	do := func(method, url, body string) (int, []byte) {
		t.Helper()
		req, _ := http.NewRequest(method, url, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+admin)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, b
	}
	status, b := do("POST", "http://"+adminAddr+"/admin/keys", `{"tenant":"newco","plan":"team"}`)
	var made struct{ Key, ID string }
	if json.Unmarshal(b, &made); status != 201 || made.ID == "" {
		t.Fatalf("POST /admin/keys as the ACL user: %d %s\n%s", status, b, sv.logs.String())
	}
	if status, b := do("GET", "http://"+adminAddr+"/admin/keys?tenant=newco", ""); status != 200 || !bytes.Contains(b, []byte(made.ID)) || !bytes.Contains(b, []byte(`"total":1`)) {
		t.Errorf("GET /admin/keys: %d %s", status, b)
	}
	if status, b := do("DELETE", "http://"+adminAddr+"/admin/keys/"+made.ID, ""); status != 200 {
		t.Errorf("DELETE /admin/keys/%s: %d %s", made.ID, status, b)
	}
	resp, err := http.Post("http://"+sv.addr+"/v1/check", "application/json", strings.NewReader(`{"tenant":"acme","class":"write"}`))
	if err != nil {
		t.Fatal(err)
	}
	var d map[string]any
	json.NewDecoder(resp.Body).Decode(&d)
	resp.Body.Close()
	if d["allowed"] != true || d["reason"] != "allowed" {
		t.Errorf("a decision as the ACL user: %v, want allowed by Redis", d)
	}
	if strings.Contains(sv.logs.String(), "NOPERM") {
		t.Errorf("NOPERM in the log of a daemon on the documented ACL user:\n%s", sv.logs.String())
	}
}

// TestServeRefusesRedisSettings: a Redis that is reached but refuses the
// store URL's settings stops `fairgate serve` at start with exit code 1
// and a message naming --store and what to fix (on main each of these
// started and served by the fail mode, logging a warning): a wrong
// password, none where one is asked, an ACL user that may not decide, a
// database number the server lacks, a master name the sentinels do not
// watch. The password never shows.
func TestServeRefusesRedisSettings(t *testing.T) {
	redistest.Need(t)
	locked, err := redistest.Start("--requirepass", "right-password")
	if err != nil {
		t.Fatal(err)
	}
	defer locked.Close()
	open, err := redistest.Start()
	if err != nil {
		t.Fatal(err)
	}
	defer open.Close()
	if _, err := redistest.Do(open.Addr, "ACL", "SETUSER", "weak", "on", ">weak-password", "~fg:*", "-@all", "+hello"); err != nil {
		t.Fatal(err)
	}
	ss, err := redistest.StartSentinels(2 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer ss.Close()
	for _, c := range []struct{ name, url, want string }{
		{"wrong password", "redis://:wrong-password@" + locked.Addr, "the user name or password is wrong (WRONGPASS)"},
		{"no password", "redis://" + locked.Addr, "Redis asks for a password and none was given (NOAUTH)"},
		{"ACL user that may not decide", "redis://weak:weak-password@" + open.Addr, "may not run what fairgate needs (NOPERM)"},
		{"database out of range", "redis://" + open.Addr + "/99", "the database number is not one the server has"},
		{"unknown sentinel master", "redis-sentinel://" + strings.Join(ss.Addrs(), ",") + "/no-such-master", "the sentinels watch no master of that name"},
	} {
		t.Run(c.name, func(t *testing.T) {
			var stderr bytes.Buffer
			ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
			defer cancel()
			code := run(ctx, []string{"serve", "--listen", "127.0.0.1:0", "--store", c.url}, io.Discard, &stderr)
			if ctx.Err() != nil {
				t.Fatalf("serve started and ran until the test's deadline:\n%s", stderr.String())
			}
			out := stderr.String()
			if code != 1 || !strings.Contains(out, "fairgate: serve: --store (FAIRGATE_STORE): redisstore: Redis refused the settings of") || !strings.Contains(out, c.want) {
				t.Errorf("exit %d, stderr:\n%s\nwant exit 1 naming --store and %q", code, out, c.want)
			}
			if strings.Contains(out, "wrong-password") || strings.Contains(out, "weak-password") {
				t.Errorf("the password shows:\n%s", out)
			}
		})
	}
}

// TestServeRedisUpLaterRefusing: a daemon started while its Redis is down
// comes up (as before); when Redis comes back refusing the password of the
// daemon's password_file, it logs an ERROR (not a warning), counts it in
// fairgate_store_connect_failures_total{reason="refused"} and keeps
// deciding by the fail mode; once the file holds the right password, the
// next try connects, with no restart.
func TestServeRedisUpLaterRefusing(t *testing.T) {
	redistest.Need(t)
	srv, err := redistest.Start("--requirepass", "right-password")
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	srv.Kill()
	pf := filepath.Join(t.TempDir(), "redis-password")
	if err := os.WriteFile(pf, []byte("wrong-password\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	sv := startServe(t, "--listen", "127.0.0.1:0", "--store", "redis://"+srv.Addr+"?password_file="+pf)
	defer sv.stop()
	metric := func(name string) string {
		resp, err := http.Get("http://" + sv.addr + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		for _, l := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(l, name+" ") {
				return strings.Fields(l)[1]
			}
		}
		return ""
	}
	if got := metric(`fairgate_store_connect_failures_total{reason="unreachable"}`); got == "" || got == "0" {
		t.Errorf("connect failures while Redis is down: %q, want counted as unreachable", got)
	}
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	testwait.EventuallyNil(t, 30*time.Second, "the refusal logged and counted", func() error {
		if !strings.Contains(sv.logs.String(), `"level":"ERROR","msg":"store refuses fairgate's settings`) {
			return fmt.Errorf("no ERROR line:\n%s", sv.logs.String())
		}
		if got := metric(`fairgate_store_connect_failures_total{reason="refused"}`); got == "" || got == "0" {
			return fmt.Errorf("refused: %q", got)
		}
		return nil
	})
	if c := statusOf(t, "POST", "http://"+sv.addr+"/v1/check", `{"tenant":"acme","class":"read"}`, ""); c != 200 {
		t.Errorf("/v1/check while Redis refuses: %d", c)
	}
	if err := os.WriteFile(pf, []byte("right-password\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	testwait.EventuallyNil(t, 30*time.Second, "connected with the fixed password file", func() error {
		if metric("fairgate_store_up") != "1" {
			return fmt.Errorf("store not up:\n%s", sv.logs.String())
		}
		return nil
	})
}
