"""Several replicas of the service on one database: shared ephemeral state in Redis, one writer per server.

Below the domains (they import these; these import only settings, db, indexer and policy's rate-limit protocol):
- `state`: the replica's id, Redis bus, writer locks and follower on `Resources.cluster`, and `announce`;
- `bus`: the Redis connection, the change-event channel every replica listens to, and its health;
- `ratelimit`: token buckets in Redis (one Lua script), with the in-process bucket as the fallback;
- `changes` and `vectors`: the catalog's change sequence and the stored tool vectors (SQL repositories);
- `writers`: PostgreSQL advisory locks that choose the one replica syncing each upstream server's tools.

Above the domains (wired by main.py, like routes):
- `follower`: keeps this replica's name directory, permission snapshot, tool cache and index in step;
- `servers`: servers added or removed on another replica are connected or stopped here;
- `runtime`: the start-up and shutdown hooks.

Without `cluster.redis_url` nothing here connects and the service runs as one process."""
