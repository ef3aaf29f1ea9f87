// Package memstore is fairgate's in-process store: the embedded default,
// and the fallback limiter when a shared store is out.
//
// State lives in sharded open-addressed tables (table.go); a batch locks the shards it touches in
// index order, decides every check with package algo, and commits all or
// nothing. A decision on an existing key allocates nothing.
//
// Each shard remembers the last few limits it decided under, compiled
// ([algo.Limit.Compile]: validated once, with GCRA's division by the
// emission interval turned into multiplications). A policy has few limits,
// so most decisions skip validation and divisions; a limit the shard has not
// seen is validated and compiled as it comes, and an invalid one gets the
// same error as [store.Validate] gives.
//
// Memory is bounded: Config.MaxKeys caps the keys held (per algorithm and
// key, across all shards). When a shard is full, inserting evicts an expired
// key if one is near the least recently used end, else the least recently
// used key. Evicting a key forgets its state: the key starts again full,
// which is the only way an attacker who floods distinct keys can affect
// others. Keys whose state has expired and that stay unused for
// Config.IdleAfter are also removed as traffic passes (each call checks the
// least recently used keys of the shards it touches), and by [Store.Sweep].
//
// Bytes per key (measured with a 22-byte key, see bench/RESULTS.md): about
// 152 for GCRA, token bucket, sliding window and fixed window, key included;
// a sliding log key adds 8 bytes per logged unit (at most algo.MaxLogLimit,
// so at most about 80 KB). The default bound of 1,000,000 keys is therefore
// about 152 MB for the counter algorithms.
//
// Time comes from Config.Now, so tests can drive a virtual clock.
package memstore
