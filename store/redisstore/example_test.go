package redisstore_test

import (
	"context"
	"fmt"
	"log"

	"github.com/fairgate/fairgate/algo"
	"github.com/fairgate/fairgate/store"
	"github.com/fairgate/fairgate/store/redisstore"
)

// A store on a Redis (or, with redis-cluster://, a Redis Cluster) that
// every instance of a service shares: each batch is one atomic script
// call that reads Redis TIME.
func ExampleNew() {
	st, err := redisstore.New(redisstore.Config{URL: "redis://127.0.0.1:6379/0"})
	if err != nil {
		log.Fatal(err) // a bad URL; an unreachable server fails the first Take
	}
	defer st.Close()
	var res store.Result
	err = st.Take(context.Background(), []store.Check{
		{Key: "rl:{t:acme}:all", Limit: algo.PerMinute(120).WithBurst(30), Cost: 1},
	}, &res)
	fmt.Println(res.Allowed, err)
}
