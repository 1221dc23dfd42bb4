"""A deterministic simulation of pydble's cluster DDL protocol (issue 17, item 5).

One seeded random.Random, a virtual clock and a single-threaded event queue drive models of
ZooKeeper, the backends, the peer channel and the proxy instances; a checker asserts the protocol's
promises after every step. No real time, no threads, no sockets: a seed replays a schedule exactly.
"""
