// Package bench compares fairgate with its peers side by side in the same
// run: golang.org/x/time/rate behind a mutex (in memory), and
// github.com/go-redis/redis_rate/v10 (on Redis), plus the go-redis versus
// rueidis client choice. It is its own module so that fairgate never
// depends on the peers. The figures and commands are in RESULTS.md.
package bench
