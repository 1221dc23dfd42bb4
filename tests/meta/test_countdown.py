"""The countdown tree fires each node, schema and the load exactly once, in any order."""

from __future__ import annotations

import random
import threading

from hypothesis import given, settings
from hypothesis import strategies as st

from meta.countdown import CONFIG, DEFAULT, Countdown, LoadTree


def test_countdown_fires_once_on_last_part() -> None:
    fired: list[int] = []
    c = Countdown("x", ["a", "b"], lambda: fired.append(1))
    assert not c.complete("zzz")
    assert not c.complete("a")
    assert not c.complete("a")
    assert c.complete("b")
    assert not c.complete("b")
    assert not c.force()
    assert not c.add("c")
    assert fired == [1]


def test_countdown_force_and_arm() -> None:
    fired: list[str] = []
    c = Countdown("x", ["a"], lambda: fired.append("x"))
    assert not c.arm()  # something is pending
    assert c.force()
    assert not c.complete("a")
    empty = Countdown("e", (), lambda: fired.append("e"))
    assert empty.arm() and not empty.arm()
    assert fired == ["x", "e"]


def _tree(schema_units, events):
    nodes_fired: list[str] = []
    schemas_fired: list[str] = []
    loads: list[int] = []
    tree_box = {}

    def on_node(n: str) -> None:
        nodes_fired.append(n)

    def on_schema(s: str) -> None:
        # a schema may only complete once every node it waits for has completed
        for node, _role in schema_units[s]:
            assert tree_box["t"].nodes[node].fired, (s, node)
        schemas_fired.append(s)

    def on_load() -> None:
        assert all(c.fired for c in tree_box["t"].schemas.values())
        loads.append(1)

    tree = LoadTree(schema_units, on_node=on_node, on_schema=on_schema, on_load=on_load)
    tree_box["t"] = tree
    return tree, nodes_fired, schemas_fired, loads


@st.composite
def plans(draw):
    nodes = [f"dn{i}" for i in range(draw(st.integers(1, 6)))]
    schemas = {}
    for s in range(draw(st.integers(1, 4))):
        cfg_nodes = draw(st.lists(st.sampled_from(nodes), max_size=len(nodes), unique=True))
        units = {(n, CONFIG) for n in cfg_nodes}
        if draw(st.booleans()):
            units.add((draw(st.sampled_from(nodes)), DEFAULT))
        schemas[f"s{s}"] = units
    batches = {n: draw(st.integers(0, 4)) for n in nodes}
    failing = draw(st.sets(st.sampled_from(nodes)))
    seed = draw(st.integers(0, 2**32 - 1))
    return schemas, batches, failing, seed


@settings(max_examples=300, deadline=None)
@given(plans())
def test_tree_exactly_once_random_orders_with_duplicates(plan) -> None:
    schema_units, batches, failing, seed = plan
    rnd = random.Random(seed)
    tree, nodes_fired, schemas_fired, loads = _tree(schema_units, None)
    tree.start()
    used = set(tree.nodes)
    # each node: register batches, finish listing, then its batches (some retried: add one more
    # before completing the failed one), with duplicates; failing nodes are forced midway
    per_node_events: dict[str, list[tuple[str, object]]] = {}
    for n in used:
        ev: list[tuple[str, object]] = [("add", batches[n]), ("listed", None)]
        ids = list(range(batches[n]))
        retry_id = batches[n]
        for b in ids:
            if rnd.random() < 0.2:
                ev.append(("add", 1))          # retry batch gets id retry_id
                ev.append(("done", b))
                ev.append(("done", retry_id))
                retry_id += 1
            else:
                ev.append(("done", b))
            if rnd.random() < 0.3:
                ev.append(("done", b))          # duplicate
        if n in failing:
            cut = rnd.randrange(len(ev) + 1)
            ev = ev[:cut] + [("fail", None)] + [e for e in ev[cut:] if e[0] == "done"]
        ev.append(("fail", None))               # the `finally` of a node task always forces
        per_node_events[n] = ev
    # interleave nodes randomly, keeping each node's own order
    queues = {n: list(ev) for n, ev in per_node_events.items()}
    while queues:
        n = rnd.choice(sorted(queues))
        kind, arg = queues[n].pop(0)
        if not queues[n]:
            del queues[n]
        if kind == "add":
            tree.add_batches(n, arg)
        elif kind == "listed":
            tree.listed(n)
        elif kind == "done":
            tree.batch_done(n, arg)
        else:
            tree.node_failed(n)
    assert sorted(nodes_fired) == sorted(used)
    assert sorted(schemas_fired) == sorted(schema_units)
    assert loads == [1]
    assert tree.done
    # nothing fires again
    for n in used:
        assert not tree.node_failed(n)
        assert not tree.batch_done(n, 0)
    tree.force_all()
    assert loads == [1] and len(schemas_fired) == len(schema_units)


def test_node_completes_only_after_listing_and_all_batches() -> None:
    tree, nodes_fired, schemas_fired, loads = _tree({"s": {("dn1", CONFIG), ("dn1", DEFAULT)}}, None)
    tree.start()
    ids = tree.add_batches("dn1", 2)
    assert ids == [0, 1]
    assert not tree.batch_done("dn1", 0)
    assert not tree.listed("dn1")
    (retry,) = tree.add_batches("dn1", 1)       # batch 1 hit error 1146: retry the rest
    assert retry == 2
    assert not tree.batch_done("dn1", 1)
    assert tree.batch_done("dn1", retry)
    # one node serving a schema twice (configured + default) completes both units at once
    assert nodes_fired == ["dn1"] and schemas_fired == ["s"] and loads == [1]


def test_schema_without_nodes_and_empty_load_complete_at_start() -> None:
    tree, _, schemas_fired, loads = _tree({"empty": set()}, None)
    tree.start()
    assert schemas_fired == ["empty"] and loads == [1]
    tree2, _, _, loads2 = _tree({}, None)
    tree2.start()
    assert loads2 == [1]


def test_failing_observer_does_not_hang_the_load() -> None:
    loads: list[int] = []

    def boom(_: str) -> None:
        raise RuntimeError("observer bug")

    tree = LoadTree({"s": {("dn1", CONFIG)}}, on_schema=boom, on_load=lambda: loads.append(1))
    tree.start()
    try:
        tree.listed("dn1")
    except RuntimeError:
        pass
    assert loads == [1]


def test_threads_race_to_complete() -> None:
    for _ in range(50):
        fired: list[int] = []
        c = Countdown("x", range(64), lambda: fired.append(1))
        parts = list(range(64)) * 3
        random.shuffle(parts)
        chunks = [parts[i::4] for i in range(4)]
        ts = [threading.Thread(target=lambda ch=ch: [c.complete(p) for p in ch]) for ch in chunks]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        assert fired == [1]
