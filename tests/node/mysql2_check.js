// What tests/test_compat_node.py runs: the real mysql2 driver against pydble, one JSON line of results.
// Usage: node mysql2_check.js PORT
const mysql = require('mysql2/promise');

async function attempt(f) {
  try {
    return {ok: await f()};
  } catch (e) {
    return {errno: e.errno || null, code: e.code || null, message: e.message};
  }
}

(async () => {
  const port = Number(process.argv[2]);
  const out = {};
  const c = await mysql.createConnection({host: '127.0.0.1', port, user: 'test', password: '111111',
                                          database: 'schema1'});
  // mysql2 asks for utf8mb4_unicode_ci in its handshake (and again in COM_CHANGE_USER)
  out.collation = (await c.query('SELECT @@collation_connection AS c'))[0][0].c;
  // numbers go as DOUBLE parameters: LIMIT and OFFSET must read them as MariaDB does
  out.limit = (await c.execute('SELECT id FROM node_t ORDER BY id LIMIT ?', [2]))[0].map(r => r.id);
  out.limit_offset = (await c.execute('SELECT id FROM node_t ORDER BY id LIMIT ?, ?', [1, 2]))[0].map(r => r.id);
  out.offset = (await c.execute('SELECT id FROM node_t ORDER BY id LIMIT ? OFFSET ?', [2, 3]))[0].map(r => r.id);
  out.limit_half = (await c.execute('SELECT id FROM node_t ORDER BY id LIMIT ?', [2.5]))[0].map(r => r.id);
  // text that is not a whole number (MariaDB reads '2x' as 2, with a warning): refused with a reason
  out.limit_text = await attempt(() => c.execute('SELECT id FROM node_t LIMIT ?', ['2x']));
  out.point = (await c.execute('SELECT id, name FROM node_t WHERE id = ?', [3]))[0];
  // a number as the sharding key of an INSERT routes like the integer it is; other types round-trip
  await c.execute('INSERT INTO node_t (id, name) VALUES (?, ?)', [10, "it's \\ ten"]);
  out.inserted = (await c.execute('SELECT id, name FROM node_t WHERE id = ?', [10]))[0];
  out.types = (await c.execute('SELECT ? AS s, ? AS n, ? AS t, HEX(?) AS h',
                               ['caf\u00e9', null, true, Buffer.from([0xff, 0x00, 0x27])]))[0][0];
  const [dbl, fields] = await c.execute('SELECT ? AS v, ? + 1 AS w', [2.5, 2]);
  out.double = dbl[0];
  out.double_type = fields[0].columnType;
  // COM_CHANGE_USER: another user, its schema, a fresh session
  await c.query("SET @tag = 'before'");
  await c.query('BEGIN');
  await c.execute('INSERT INTO node_t (id, name) VALUES (?, ?)', [100, 'uncommitted']);
  await c.changeUser({user: 'other', password: '222222', database: 'schema2'});
  out.after_change = {...(await c.query('SELECT USER() AS u, DATABASE() AS d'))[0][0],
                      ...(await c.query('SELECT @tag AS tag, @@autocommit AS ac'))[0][0]};
  out.collation_after_change = (await c.query('SELECT @@collation_connection AS c'))[0][0].c;
  out.prepared_after_change = (await c.execute('SELECT ? + 0 AS one', [1]))[0][0];
  await c.changeUser({user: 'test', password: '111111', database: 'schema1'});
  out.back = (await c.query('SELECT USER() AS u, DATABASE() AS d'))[0][0];
  out.rolled_back = (await c.execute('SELECT COUNT(*) AS n FROM node_t WHERE id = ?', [100]))[0][0].n;
  out.bad_change = await attempt(() => c.changeUser({user: 'other', password: 'wrong'}));
  out.after_bad = await attempt(() => c.query('SELECT 1'));
  c.destroy();
  console.log(JSON.stringify(out));
})().catch(e => {
  console.error(e);
  process.exit(1);
});
