"""Fuzzing the SQL side: tokenizer, router, manager parser and the session's local statement parsers.

On arbitrary text and on grammar-generated MySQL (SELECT/INSERT/UPDATE/DELETE/DDL over the DESIGN.md
section 2 tables, with literals, comments, quoting and hints, then randomly mutated) the router and
the parsers may only refuse with a meta.errors.ProxyError (which the session turns into an ERR
packet), and each case must finish well within half a second: no regex backtracking blow-up.
"""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

import fuzzlib
from fuzzlib import any_sql, bounded, count, fuzz, manager_command, sql_statement
from meta.errors import ProxyError
from proxy.plan import local
from proxy.manager.manager_parse import parse_manager
from proxy.plan.router import Plan, Router
from proxy.plan.sqltok import first_keyword, split_statements, tokenize

ROUTER = Router(fuzzlib.example_config())
NODES = {"dn1", "dn2", "dn3", "dn4", "dn5"}
SCHEMA_ARGS = st.sampled_from(["schema1", "schema1", "schema2", None, "SCHEMA1", "nosuch"])
LIMIT_S = 0.5


def route(sql: str, schema: str | None) -> Plan | None:
    """Route sql under the time bound; None when refused with a ProxyError."""
    def run() -> Plan | None:
        try:
            return ROUTER.route(sql, schema)
        except ProxyError as e:
            assert isinstance(e.code, int) and isinstance(e.message, str)
            return None
    return bounded(run, LIMIT_S)


def check_plan(plan: Plan | None) -> None:
    """A plan names configured nodes only and carries SQL text for each."""
    if plan is None:
        return
    if plan.setop is not None:   # a set operation combined in the proxy: each branch is a plan of its own
        for leaf in plan.setop.leaves:
            check_plan(leaf.plan)
        return
    assert plan.targets, plan
    for t in plan.targets:
        assert t.node in NODES and isinstance(t.sql, str)


# -- the tokenizer ------------------------------------------------------------------------------------

@fuzz(ci=300, long=6_000)
@given(sql=any_sql())
def test_sqltok_never_raises_and_is_linear(sql: str) -> None:
    """tokenize/split_statements/first_keyword accept anything, quickly, and tokens point into the text."""
    count("sqltok")
    toks = bounded(lambda: tokenize(sql), LIMIT_S)
    last = 0
    for kind, text, start, end in toks:
        assert last <= start <= end and sql[start:end] == text and kind in "wqsnxpvhoe"
        last = end
    parts = bounded(lambda: split_statements(sql), LIMIT_S)
    assert all(isinstance(p, str) and p for p in parts)
    kw = bounded(lambda: first_keyword(sql), LIMIT_S)
    assert kw == kw.upper()


@fuzz(ci=20, long=300)
@given(unit=st.sampled_from(["'", '"', "`", "/*", "(", "'\\", "\\", "-- ", "/*!", "a'", "''", "``", "x'", "0x",
                             "1e", "@@", "@'", "?", "#"]),
       n=st.integers(1000, 20_000))
def test_sqltok_and_router_on_long_repetitions(unit: str, n: int) -> None:
    """Long runs of quote, comment and paren openers: what backtracking regexes choke on."""
    count("long repetitions")
    sql = "SELECT " + unit * n
    bounded(lambda: tokenize(sql), LIMIT_S * 2)
    bounded(lambda: split_statements(sql), LIMIT_S * 2)
    bounded(lambda: first_keyword(unit * n), LIMIT_S * 2)
    route(sql, "schema1")
    route("SELECT * FROM sharding_4_t1 WHERE id IN (" + unit * n, "schema1")


# -- the router -----------------------------------------------------------------------------------------

@fuzz(ci=400, long=10_000)
@given(sql=st.one_of(st.text(max_size=200), fuzzlib.surrogate_text(), fuzzlib.token_soup()), schema=SCHEMA_ARGS)
def test_router_on_arbitrary_text(sql: str, schema: str | None) -> None:
    """Arbitrary text and token soup: a Plan or a ProxyError, within the time bound."""
    count("router: arbitrary text")
    check_plan(route(sql, schema))


@fuzz(ci=400, long=12_500)
@given(sql=sql_statement(), schema=SCHEMA_ARGS)
def test_router_on_generated_sql(sql: str, schema: str | None) -> None:
    """Plausible MySQL over the configured tables: a Plan on configured nodes or a ProxyError."""
    count("router: generated SQL")
    check_plan(route(sql, schema))


@fuzz(ci=400, long=7_500)
@given(sql=fuzzlib.mutated(sql_statement()), schema=SCHEMA_ARGS)
def test_router_on_mutated_sql(sql: str, schema: str | None) -> None:
    """Generated SQL with cuts, duplications and stray tokens: a Plan or a ProxyError."""
    count("router: mutated SQL")
    check_plan(route(sql, schema))


@fuzz(ci=100, long=3_000)
@given(stmts=st.lists(sql_statement(), min_size=2, max_size=4))
def test_router_refuses_multi_statement_text(stmts: list[str]) -> None:
    """Several statements joined by ';' and each part after split_statements: never a crash."""
    count("router: multi-statement")
    text = "; ".join(stmts)
    route(text, "schema1")
    for part in bounded(lambda: split_statements(text), LIMIT_S):
        check_plan(route(part, "schema1"))


# -- manager commands ----------------------------------------------------------------------------------

@fuzz(ci=300, long=5_000)
@given(text=st.one_of(manager_command(), st.text(max_size=80), fuzzlib.mutated(manager_command())))
def test_parse_manager(text: str) -> None:
    """Manager-port commands, real, near-miss or random: a command record or a ProxyError (usage line)."""
    count("parse_manager")

    def run() -> None:
        try:
            parse_manager(text)
        except ProxyError:
            pass
    bounded(run, LIMIT_S)


# -- statements the session answers itself ----------------------------------------------------------------

@st.composite
def set_statements(draw: st.DrawFn) -> str:
    """SET statements: names, charsets, transactions, scopes, user and system variables, near misses."""
    item = st.one_of(
        st.sampled_from(["autocommit = 0", "autocommit=ON", "autocommit = 'x'", "NAMES utf8mb4", "NAMES 'latin1'",
                         "NAMES utf8 COLLATE utf8_bin", "NAMES DEFAULT", "CHARACTER SET gbk", "CHARSET 'utf8'",
                         "@a = 1", "@`b` := 'x'", "@@session.sql_mode = 'ANSI'", "@@global.x = 1", "GLOBAL x = 1",
                         "PERSIST x = 1", "SESSION tx_isolation = 'READ-COMMITTED'", "LOCAL wait_timeout = 5",
                         "transaction_read_only = 1", "x", "= 1", "@@ = 1", "`a`.`b` = 1", "NAMES", ""]),
        st.builds(lambda n, v: f"{n} = {v}", st.from_regex(r"@?@?[a-z_.`]{1,10}", fullmatch=True),
                  st.one_of(fuzzlib.literal, st.text(max_size=10))),
    )
    head = draw(st.sampled_from(["SET ", "set ", "SET\n", "SET /* c */ ", " SET  "]))
    if draw(st.integers(0, 5)) == 0:
        return head + draw(st.sampled_from(["", "GLOBAL ", "SESSION ", "LOCAL "])) + "TRANSACTION " + draw(
            st.sampled_from(["ISOLATION LEVEL READ COMMITTED", "READ ONLY", "READ WRITE, ISOLATION LEVEL SERIALIZABLE",
                             "x", "", ",", "READ ONLY,"]))
    return head + ", ".join(draw(st.lists(item, min_size=1, max_size=3))) + draw(st.sampled_from(["", ";", " ; "]))


@fuzz(ci=300, long=5_000)
@given(sql=st.one_of(set_statements(), st.text(max_size=60).map(lambda s: "SET " + s), st.text(max_size=60),
                     fuzzlib.mutated(set_statements())))
def test_parse_set(sql: str) -> None:
    """proxy.plan.local.parse_set: a list of assignments or a ProxyError, quickly."""
    count("parse_set")

    def run() -> None:
        try:
            for a in local.parse_set(sql):
                assert isinstance(a.key, str) and isinstance(a.sql, str)
        except ProxyError:
            pass
    bounded(run, LIMIT_S)


@fuzz(ci=300, long=5_000)
@given(sql=st.one_of(any_sql(), st.sampled_from(["SELECT ", "SHOW ", "SAVEPOINT ", "ROLLBACK TO ", "SHOW TABLES ",
                                                "SHOW DATABASES LIKE '", "SELECT DATABASE("]).flatmap(
                                                    lambda p: st.text(max_size=40).map(lambda s: p + s))),
       schema=st.sampled_from([None, "schema1", "we'ird\\"]), pattern=st.text(max_size=12))
def test_local_statement_helpers(sql: str, schema: str | None, pattern: str) -> None:
    """The other local parsers the session runs on every statement: ProxyError at worst, quickly."""
    count("local helpers")
    values = {"database": schema, "connection_id": 7, "last_insert_id": 0, "user": "test@h",
              "version_comment": "pydble"}

    def run() -> None:
        for fn, args in ((local.local_select, (sql, values)), (local.parse_savepoint, (sql,)),
                         (local.substitute_database, (sql, schema)), (local.show_databases, (sql, ["schema1"])),
                         (local.parse_show_tables, (sql,)), (local.like_match, (pattern, sql[:40])),
                         (local.split_top_level, (sql,))):
            try:
                fn(*args)
            except ProxyError:
                pass
    bounded(run, LIMIT_S)
