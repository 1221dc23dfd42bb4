import pymysql

def test_scratch(fresh_proxy):
    p = fresh_proxy()
    c = p.connect()
    cur = c.cursor()
    def q(sql):
        try:
            cur.execute(sql)
            r = cur.fetchall()
            print("OK ", sql, "->", r[:6])
        except pymysql.MySQLError as e:
            print("ERR", sql, "->", e.args)
    for sql in ("DROP TABLE IF EXISTS sharding_4_t1", "CREATE TABLE sharding_4_t1 (id INT PRIMARY KEY, name VARCHAR(20))",
                "INSERT INTO sharding_4_t1 VALUES (1,'a'),(2,'b'),(3,'c'),(4,'d')",
                "DROP TABLE IF EXISTS test", "CREATE TABLE test (id INT PRIMARY KEY, label VARCHAR(10))",
                "INSERT INTO test VALUES (1,'x'),(2,'y')",
                "DROP VIEW IF EXISTS v", "DROP VIEW IF EXISTS g", "DROP VIEW IF EXISTS j", "DROP VIEW IF EXISTS d5",
                "CREATE VIEW v AS SELECT id, name FROM sharding_4_t1",
                "CREATE VIEW g AS SELECT * FROM test",
                "CREATE VIEW j AS SELECT s.id, s.name, t.label FROM sharding_4_t1 s JOIN test t ON s.id = t.id",
                "CREATE TABLE IF NOT EXISTS dtab (id INT PRIMARY KEY)",
                "CREATE VIEW d5 AS SELECT id FROM dtab",
                "SELECT * FROM v", "SELECT * FROM v ORDER BY id DESC LIMIT 1", "SELECT * FROM g", "SELECT * FROM j ORDER BY id",
                "SELECT * FROM v JOIN test t ON v.id = t.id", "SELECT v.name FROM v WHERE v.id IN (1,3) ORDER BY 1",
                "SELECT * FROM v WHERE 1=0", "EXPLAIN SELECT * FROM v WHERE id = 1", "DESC v", "DESC d5", "SHOW COLUMNS FROM v",
                "SELECT * FROM (SELECT * FROM v) x WHERE x.id = 2", "SELECT (SELECT COUNT(*) FROM g)",
                "SELECT id FROM sharding_4_t1 WHERE id IN (SELECT id FROM g)",
                "UPDATE v SET name='z' WHERE id = 1", "DELETE FROM v WHERE id = 1", "INSERT INTO d5 VALUES (7)", "SELECT * FROM d5",
                "LOCK TABLES v READ", "SHOW CREATE TABLE v", "SHOW CREATE VIEW d5", "SHOW FULL TABLES",
                "SELECT TABLE_NAME, TABLE_TYPE FROM information_schema.TABLES WHERE TABLE_SCHEMA='schema1' ORDER BY 1",
                "SELECT TABLE_NAME, IS_UPDATABLE FROM information_schema.VIEWS",
                "SELECT COUNT(*) FROM information_schema.COLUMNS WHERE TABLE_NAME='v'",
                "CREATE VIEW bad AS SELECT nope FROM sharding_4_t1", "CREATE VIEW bad AS SELECT * FROM nope_t",
                "CREATE VIEW bad AS SELECT name, COUNT(*) FROM sharding_4_t1 GROUP BY name",
                "CREATE VIEW self1 AS SELECT * FROM self1", "CREATE VIEW schema2.x AS SELECT * FROM schema1.v",
                "SELECT * FROM schema2.x", "DROP VIEW schema2.x",
                "CREATE VIEW IF NOT EXISTS v AS SELECT 1", "SHOW WARNINGS",
                "/*!pydble:shardingNode=dn5*/ SELECT * FROM d5",
                "CREATE VIEW uni AS SELECT id FROM sharding_4_t1 UNION SELECT id FROM test",
                "CREATE VIEW e AS SELECT 1 AS one", "SELECT * FROM e",
                ):
        q(sql)
    print(p.log_text()[-3000:])
