// Package redisq is the fairq.Queue on Redis Streams: jobs survive worker
// deaths and fairgate restarts, and every instance on one Redis (or Redis
// Cluster) shares the queues.
//
// Keys. Each kind has its own hash tag, <prefix>{q:<kind>}:, so a kind's
// keys are in one slot and every step is one atomic script:
//
//	s:<tenant tag>   the tenant's stream (consumer group "w"): its jobs in order
//	j:<id>           a job's hash: tenant, status, attempts, payload, stream entry, lease token
//	ring             zset of the tenants with jobs in their stream, in dispatch order
//	deficit, weight  hashes: each tenant's deficit and weight (deficit round robin)
//	inflight         zset of running jobs by lease end (ms)
//	delayed          zset of nacked jobs by retry time (ms)
//	depth, tdepth    unfinished jobs of the kind, and by tenant
//	dead             list of the jobs that ran out of attempts (the last 10,000)
//
// Enqueue XADDs to the tenant's stream; Lease picks the tenant by deficit
// round robin and XREADGROUPs one entry of its stream, redelivering first
// any job whose lease ended (XCLAIM with the visibility timeout as the
// least idle time); Ack and Nack XACK and XDEL the entry. A worker that dies
// mid-job leaves its entry pending in the group until the lease ends, and
// the job is handed out again; nothing lives in the fairgate process, so a
// restart loses nothing. Times come from Redis TIME.
package redisq
