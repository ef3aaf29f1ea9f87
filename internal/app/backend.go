package app

import (
	"fmt"
	"log/slog"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/fairgate/fairgate/limiter"
	"github.com/fairgate/fairgate/store"
	"github.com/fairgate/fairgate/store/memstore"
	"github.com/fairgate/fairgate/store/redisstore"
)

// Backend is the store a URL names, with what comes with it.
type Backend struct {
	// Store decides.
	Store store.Store
	// Control keeps the run-time overlay; nil means in-process.
	Control limiter.ControlStore
	// Timeout bounds each decision's store call: -1 (none) in-process.
	Timeout time.Duration
	// lazy is the Redis connection, connected or still connecting; nil
	// for the memory store.
	lazy *lazyRedis
}

// OpenBackend opens the store a URL names: memory:// (optionally
// ?max_keys=N&max_bytes=N&shards=N), in this process; or a redisstore
// URL, shared, connected in the background by Start (a pod restarted
// during a Redis outage still comes up). timeout bounds each decision's
// call to a shared store.
func OpenBackend(raw string, timeout time.Duration, log *slog.Logger) (Backend, error) {
	if rest, ok := strings.CutPrefix(raw, "memory://"); ok {
		st, err := openMemory(raw, rest)
		return Backend{Store: st, Timeout: -1}, err
	}
	if err := redisstore.CheckURL(raw); err != nil {
		return Backend{}, err
	}
	z := &lazyRedis{url: raw, log: log}
	return Backend{Store: lazyStore{z}, Control: lazyControl{z}, Timeout: timeout, lazy: z}, nil
}

// openMemory opens a memory store with the options of its URL's query.
func openMemory(raw, query string) (store.Store, error) {
	var c memstore.Config
	if query == "" {
		return memstore.New(c), nil
	}
	q, err := url.ParseQuery(strings.TrimPrefix(query, "?"))
	if err != nil {
		return nil, fmt.Errorf("store %q: %w", redisstore.RedactURL(raw), err)
	}
	for k, v := range q {
		if k != "max_keys" && k != "max_bytes" && k != "shards" {
			return nil, fmt.Errorf("store %q: unknown option %q: want max_keys, max_bytes or shards", redisstore.RedactURL(raw), k)
		}
		n, err := strconv.Atoi(v[0])
		if err != nil || n < 1 {
			return nil, fmt.Errorf("store %q: %s is not a positive integer", redisstore.RedactURL(raw), k)
		}
		switch k {
		case "max_keys":
			c.MaxKeys = n
		case "max_bytes":
			if n < 1<<20 {
				return nil, fmt.Errorf("store %q: max_bytes=%d is under 1 MiB (1048576)", redisstore.RedactURL(raw), n)
			}
			c.MaxBytes = int64(n)
		case "shards":
			c.Shards = n
		}
	}
	return memstore.New(c), nil
}
