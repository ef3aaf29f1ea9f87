package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/fairgate/fairgate/internal/testenv"
	"github.com/fairgate/fairgate/internal/testwait"
)

// TestJWTLeewaySetting: jwt.leeway is the tolerance past a token's exp,
// put in force at start and by a reload: with 30s a token 10 s past its
// exp is accepted, and after a reload to 0 it is refused; a leeway over
// 5m refuses to start, naming the field. (The 30 s leeway was built in,
// undocumented and fixed.)
func TestJWTLeewaySetting(t *testing.T) {
	example, path := exampleCopy(t)
	secret := []byte(strings.Repeat("k", 32))
	secretPath := filepath.Join(filepath.Dir(path), "jwt-secret")
	if err := os.WriteFile(secretPath, append(secret, '\n'), 0o600); err != nil {
		t.Fatal(err)
	}
	withLeeway := func(leeway string) []byte {
		jwtSection := fmt.Sprintf("  jwt:\n    audience: api\n    hmac_secret_file: %s\n    leeway: %s\n", secretPath, leeway)
		out := bytes.Replace(example, []byte("  # jwt:\n"), []byte(jwtSection+"  # jwt:\n"), 1)
		if bytes.Equal(out, example) {
			t.Fatal("examples/fairgate.yaml has no commented jwt section to put one before")
		}
		return out
	}

	os.WriteFile(path, withLeeway("10m"), 0o600)
	var stderr testenv.SyncBuffer
	if code := run(context.Background(), []string{"serve", "--listen", "127.0.0.1:0", "--config", path}, &bytes.Buffer{}, &stderr); code == 0 || !strings.Contains(stderr.String(), "auth.jwt.leeway: 10m0s is over 5m0s") {
		t.Fatalf("leeway 10m: exit %d, %s; want a refusal naming auth.jwt.leeway", code, stderr.String())
	}

	os.WriteFile(path, withLeeway("30s"), 0o600)
	sv := startServe(t, "--listen", "127.0.0.1:0", "--config", path, "--config-poll", "1h")
	tok, err := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{"aud": "api", "tenant": "newco", "exp": time.Now().Add(-10 * time.Second).Unix()}).SignedString(secret)
	if err != nil {
		t.Fatal(err)
	}
	me := func() int { return statusOf(t, "GET", "http://"+sv.addr+"/v1/me/limits", "", tok) }
	if c := me(); c != 200 {
		t.Fatalf("a token 10 s past exp, leeway 30s: %d, want 200", c)
	}
	os.WriteFile(path, withLeeway("0s"), 0o600)
	syscall.Kill(os.Getpid(), syscall.SIGHUP)
	testwait.EventuallyNil(t, 30*time.Second, "the reload to leeway 0 in force", func() error {
		if c := me(); c != 401 {
			return fmt.Errorf("a token 10 s past exp: %d, want 401; logs:\n%s", c, sv.logs.String())
		}
		return nil
	})
	sv.stop()
}
