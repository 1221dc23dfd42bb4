"""Backend connections and their pools: relaying, pipelining, physical names, deadlocks across them."""
