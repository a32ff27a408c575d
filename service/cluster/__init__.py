"""Several replicas of the service on one database: shared ephemeral state in Redis, one writer per server.

- `bus`: the Redis connection, the change-event channel every replica listens to, and its health;
- `ratelimit`: token buckets in Redis (one Lua script), with the in-process bucket as the fallback;
- `changes` and `vectors`: the catalog's change sequence and the stored tool vectors (SQL repositories);
- `follower`: keeps this replica's name directory, permission snapshot, tool cache and index in step;
- `writers`: PostgreSQL advisory locks that choose the one replica syncing each upstream server's tools.

Without `cluster.redis_url` nothing here connects and the service runs as one process."""
