package main

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestServeAndShutdown runs `fairgate serve` on the embedded memory store,
// takes a limit over HTTP, then ends it as SIGTERM would.
func TestServeAndShutdown(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	addrc := make(chan string, 1)
	done := make(chan int, 1)
	var stderr bytes.Buffer
	go func() {
		done <- runReady(ctx, []string{"serve", "--listen", "127.0.0.1:0"}, io.Discard, &stderr, func(a string) { addrc <- a })
	}()
	var addr string
	select {
	case addr = <-addrc:
	case code := <-done:
		t.Fatalf("serve exited %d: %s", code, stderr.String())
	}
	resp, err := http.Post("http://"+addr+"/v1/take", "application/json", strings.NewReader(`{"key":"k","limit":1,"period_ms":1000}`))
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("take: %v %v", resp, err)
	}
	resp.Body.Close()
	cancel()
	select {
	case code := <-done:
		if code != 0 {
			t.Fatalf("serve exited %d after shutdown: %s", code, stderr.String())
		}
	case <-time.After(15 * time.Second):
		t.Fatal("serve did not shut down")
	}
	if !strings.Contains(stderr.String(), `"msg":"shutting down"`) {
		t.Errorf("no shutdown log line: %s", stderr.String())
	}
}

func TestUsageErrors(t *testing.T) {
	tests := []struct {
		args []string
		code int
		msg  string
	}{
		{nil, 2, "Usage:"},
		{[]string{"help"}, 0, "Usage:"},
		{[]string{"frobnicate"}, 2, `unknown command "frobnicate"`},
		{[]string{"serve", "--store", "mongodb://x"}, 1, `unknown scheme "mongodb"`},
		{[]string{"serve", "--store", "memory://?max_keys=-1"}, 1, "not a positive integer"},
		{[]string{"serve", "--store-timeout", "soon"}, 2, `store timeout "soon"`},
		{[]string{"serve", "extra"}, 2, `unexpected argument "extra"`},
		{[]string{"serve", "--listen", "256.0.0.1:99999"}, 1, "listen on"},
	}
	for _, tt := range tests {
		var out, errb bytes.Buffer
		code := run(context.Background(), tt.args, &out, &errb)
		if code != tt.code || !strings.Contains(out.String()+errb.String(), tt.msg) {
			t.Errorf("run(%q) = %d, %q; want %d with %q", tt.args, code, out.String()+errb.String(), tt.code, tt.msg)
		}
	}
}
