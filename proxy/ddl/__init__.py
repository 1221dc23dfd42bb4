"""DDL across shards and instances: the runner under the table's cluster lock, repair, running marker."""
