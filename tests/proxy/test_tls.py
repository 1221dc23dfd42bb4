"""TLS on the client port: `[server] ssl_cert` / `ssl_key`, the SSLRequest, real clients that verify.

Certificates are made here with the openssl CLI: a CA and a server certificate it signs (for
127.0.0.1), so clients can verify the chain and the host name as they would in production.
"""

from __future__ import annotations

import socket
import ssl
import struct
import subprocess
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest

from harness import ProxyProcess, missing, require_tool
from wire import BASE_CAPS, RawClient, extended_config, start_proxy

CLIENT_SSL = 1 << 11


def _openssl(*args: str) -> None:
    subprocess.run([require_tool("openssl"), *args], check=True, capture_output=True, timeout=60)


def _make_ca(d: Path, name: str) -> None:
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", f"/CN={name}",
             "-keyout", str(d / f"{name}-key.pem"), "-out", str(d / f"{name}.pem"))


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """ca.pem signs server-cert.pem (SAN IP:127.0.0.1); other-ca.pem signs nothing of ours."""
    d = tmp_path_factory.mktemp("tls")
    _make_ca(d, "ca")
    _make_ca(d, "other-ca")
    _openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=pydble-test", "-keyout",
             str(d / "server-key.pem"), "-out", str(d / "server.csr"))
    (d / "san.ext").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    _openssl("x509", "-req", "-in", str(d / "server.csr"), "-CA", str(d / "ca.pem"), "-CAkey",
             str(d / "ca-key.pem"), "-CAcreateserial", "-days", "2", "-extfile", str(d / "san.ext"),
             "-out", str(d / "server-cert.pem"))
    return d


def _tls_config(backends: list[Any], certs: Path, key: str = "server-key.pem", instance: str = "pydble-tls"
                ) -> dict[str, Any]:
    return extended_config(backends, instance=instance,
                           server={"ssl_cert": str(certs / "server-cert.pem"), "ssl_key": str(certs / key)})


@pytest.fixture(scope="module")
def tls_proxy(certs: Path, backends: list[Any]) -> Iterator[ProxyProcess]:
    p = start_proxy(_tls_config(backends, certs), "proxy-tls")
    try:
        yield p
    finally:
        p.cleanup()


def _mysql(port: int, *args: str, user: str = "test") -> subprocess.CompletedProcess:
    argv = [require_tool("mysql"), "--no-defaults", "-h127.0.0.1", f"-P{port}", f"-u{user}", "-p111111", *args]
    return subprocess.run(argv, capture_output=True, text=True, timeout=30)


# -- the greeting ---------------------------------------------------------------------------------

def test_client_ssl_is_offered_only_when_configured(tls_proxy: ProxyProcess, proxy: ProxyProcess,
                                                    certs: Path) -> None:
    with RawClient(tls_proxy.port) as c:
        assert c.read_greeting().capabilities & CLIENT_SSL
    with RawClient(proxy.port) as c:
        assert not c.read_greeting().capabilities & CLIENT_SSL
    # --ssl alone is opportunistic (MariaDB's client); verifying the server makes TLS required
    res = _mysql(proxy.port, "--ssl", "-e", "status")
    assert res.returncode == 0 and "Not in use" in res.stdout, res.stderr
    res = _mysql(proxy.port, "--ssl-verify-server-cert", f"--ssl-ca={certs / 'ca.pem'}", "-e", "SELECT 1")
    assert res.returncode != 0 and "SSL" in res.stderr


# -- the mysql CLI ----------------------------------------------------------------------------------

def test_mysql_cli_over_tls_verifying_the_server(tls_proxy: ProxyProcess, certs: Path) -> None:
    res = _mysql(tls_proxy.port, "--ssl", "--ssl-verify-server-cert", f"--ssl-ca={certs / 'ca.pem'}", "schema1",
                 "-e", "status; SELECT DATABASE(), 6 * 7")
    assert res.returncode == 0, res.stderr
    assert "Cipher in use is" in res.stdout
    assert res.stdout.rstrip().splitlines()[-1] == "schema1\t42"
    # the same client refuses a server its CA did not sign: the certificate really is checked
    res = _mysql(tls_proxy.port, "--ssl", "--ssl-verify-server-cert", f"--ssl-ca={certs / 'other-ca.pem'}",
                 "-e", "SELECT 1")
    assert res.returncode != 0 and "certificate" in res.stderr.lower()
    # the manager port speaks TLS too
    res = _mysql(tls_proxy.manager_port, "--ssl-verify-server-cert", f"--ssl-ca={certs / 'ca.pem'}", "-e", "status",
                 user="root")
    assert res.returncode == 0 and "Cipher in use is" in res.stdout, res.stderr


def test_a_client_that_does_not_ask_for_tls_still_works(tls_proxy: ProxyProcess) -> None:
    res = _mysql(tls_proxy.port, "--skip-ssl", "-e", "status; SELECT 1")
    assert res.returncode == 0, res.stderr
    assert "Cipher in use" not in res.stdout and "Not in use" in res.stdout
    assert tls_proxy.query("SELECT 2") == [(2,)]


def test_pymysql_over_tls(tls_proxy: ProxyProcess, certs: Path) -> None:
    conn = tls_proxy.connect(ssl_ca=str(certs / "ca.pem"), ssl_verify_identity=True)
    try:
        assert isinstance(conn._sock, ssl.SSLSocket)
        with conn.cursor() as cur:
            cur.execute("SELECT REPEAT('x', 100000)")  # a result spanning many TLS records
            assert cur.fetchone()[0] == "x" * 100000
    finally:
        conn.close()


# -- bytes on the wire ------------------------------------------------------------------------------

class _TlsOverRaw:
    """The client side of TLS over a RawClient's socket, driven by hand (ssl.MemoryBIO)."""

    def __init__(self, c: RawClient, ca: Path) -> None:
        ctx = ssl.create_default_context(cafile=str(ca))
        self.sock = c.sock
        self.inc, self.out = ssl.MemoryBIO(), ssl.MemoryBIO()
        self.obj = ctx.wrap_bio(self.inc, self.out, server_hostname="127.0.0.1")
        self.buf = b""

    def client_hello(self) -> bytes:
        try:
            self.obj.do_handshake()
        except ssl.SSLWantReadError:
            pass
        return self.out.read()

    def _pump(self) -> None:
        data = self.sock.recv(65536)
        if not data:
            raise EOFError("server closed the connection")
        self.inc.write(data)

    def finish_handshake(self) -> None:
        while True:
            try:
                self.obj.do_handshake()
                self.sock.sendall(self.out.read())
                return
            except ssl.SSLWantReadError:
                self.sock.sendall(self.out.read())
                self._pump()

    def send_packet(self, seq: int, payload: bytes) -> None:
        self.obj.write(struct.pack("<I", len(payload) | seq << 24) + payload)
        self.sock.sendall(self.out.read())

    def read_packet(self) -> bytes:
        while True:
            if len(self.buf) >= 4:
                n = int.from_bytes(self.buf[:3], "little")
                if len(self.buf) >= 4 + n:
                    p, self.buf = self.buf[4:4 + n], self.buf[4 + n:]
                    return p
            try:
                self.buf += self.obj.read(65536)
            except ssl.SSLWantReadError:
                self._pump()


def _ssl_request() -> bytes:
    return struct.pack("<IIB", BASE_CAPS | CLIENT_SSL, 1 << 24, 45) + b"\x00" * 23


def test_client_hello_sent_with_the_ssl_request_in_one_write(tls_proxy: ProxyProcess, certs: Path) -> None:
    """A client that sends its ClientHello in the same segment as the SSLRequest still gets TLS."""
    with RawClient(tls_proxy.port) as c:
        c.read_greeting()
        tls = _TlsOverRaw(c, certs / "ca.pem")
        c.send_raw(struct.pack("<I", 32 | 1 << 24) + _ssl_request() + tls.client_hello())
        tls.finish_handshake()
        tls.send_packet(2, c.handshake_response("test", "111111", "schema1", BASE_CAPS | CLIENT_SSL))
        ok = tls.read_packet()
        assert ok[:1] == b"\x00", ok
        tls.send_packet(0, b"\x03SELECT 7")
        assert tls.read_packet() == b"\x01"  # one column follows


@pytest.mark.parametrize("garbage", [b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", b"\x16\x03\x01\x00\x05hello", b""])
def test_garbage_instead_of_a_client_hello_is_disconnected(tls_proxy: ProxyProcess, garbage: bytes) -> None:
    with RawClient(tls_proxy.port) as c:
        c.read_greeting()
        c.send_packet(1, _ssl_request())
        if garbage:
            c.send_raw(garbage)
        else:
            c.sock.shutdown(socket.SHUT_WR)  # the client gives up before any TLS
        assert c.closed_by_server(timeout=15)
    # the server keeps serving others, with and without TLS
    assert tls_proxy.query("SELECT 3") == [(3,)]
    res = _mysql(tls_proxy.port, "--ssl", "-e", "SELECT 4")
    assert res.returncode == 0 and res.stdout.split() == ["4", "4"], res.stderr
    assert "Traceback" not in tls_proxy.log_text() and "session crashed" not in tls_proxy.log_text()


def test_an_ssl_request_where_tls_is_not_offered_is_refused(proxy: ProxyProcess) -> None:
    with RawClient(proxy.port) as c:
        c.read_greeting()
        c.send_packet(1, _ssl_request())
        err = c.read_packet()
        assert err.payload[:3] == b"\xff\x13\x04" and b"Bad handshake" in err.payload  # 1043
        assert c.closed_by_server()


# -- Connector/J ----------------------------------------------------------------------------------

JAVA = r'''
import java.sql.*;

public class TlsCheck {
    public static void main(String[] a) throws Exception {
        // sslMode=verify-ca is Connector/J 3's name; 2.x reads useSsl + trustStore (and verifies the host too)
        String url = "jdbc:mariadb://" + a[0] + "/schema1?sslMode=verify-ca&useSsl=true&trustStore=file:" + a[1]
                + "&trustStorePassword=changeit&trustStoreType=JKS";
        try (Connection c = DriverManager.getConnection(url, "test", "111111");
             Statement s = c.createStatement(); ResultSet rs = s.executeQuery("SELECT DATABASE(), 6 * 7")) {
            rs.next();
            System.out.println("ROW " + rs.getString(1) + " " + rs.getInt(2));
        }
    }
}
'''


def _keystore(certs: Path, ca: str) -> Path:
    store = certs / f"{ca}.jks"
    if not store.exists():
        subprocess.run([require_tool("keytool"), "-importcert", "-noprompt", "-alias", ca,
                        "-file", str(certs / f"{ca}.pem"),
                        "-keystore", str(store), "-storepass", "changeit", "-storetype", "JKS"],
                       check=True, capture_output=True, timeout=60)
    return store


def test_connector_j_verifies_the_ca(tls_proxy: ProxyProcess, certs: Path) -> None:
    from jobs.spark import SparkUnavailable, find_jdbc_jar

    try:
        jar = find_jdbc_jar()
    except SparkUnavailable as e:
        missing(str(e))
    (certs / "TlsCheck.java").write_text(JAVA)
    subprocess.run([require_tool("javac"), "-d", str(certs), str(certs / "TlsCheck.java")], check=True,
                   capture_output=True, timeout=120)
    run: Callable[[str], subprocess.CompletedProcess] = lambda ca: subprocess.run(  # noqa: E731
        [require_tool("java"), "-cp", f"{certs}:{jar}", "TlsCheck", f"127.0.0.1:{tls_proxy.port}",
         str(_keystore(certs, ca))], capture_output=True, text=True, timeout=120)
    res = run("ca")
    assert res.returncode == 0, res.stdout + res.stderr[-3000:]
    assert "ROW schema1 42" in res.stdout
    res = run("other-ca")  # a trust store without our CA: the driver refuses the server
    assert res.returncode != 0 and "ROW" not in res.stdout


# -- configuration ----------------------------------------------------------------------------------

def test_ssl_cert_and_key_go_together(certs: Path, backends: list[Any]) -> None:
    from meta.config import ConfigError, parse_config, tls_context

    raw = _tls_config(backends, certs)
    del raw["server"]["ssl_key"]
    with pytest.raises(ConfigError, match="server.ssl_key: ssl_cert and ssl_key go together"):
        parse_config(raw)
    raw = _tls_config(backends, certs, key="missing-key.pem")
    with pytest.raises(ConfigError, match="server.ssl_key: file .*missing-key.pem not found"):
        tls_context(parse_config(raw).server)
    raw = _tls_config(backends, certs, key="other-ca-key.pem")  # a key that is not the certificate's
    with pytest.raises(ConfigError, match="server.ssl_cert: cannot load the certificate and key"):
        tls_context(parse_config(raw).server)


def test_serve_refuses_a_bad_pair_at_start(certs: Path, backends: list[Any]) -> None:
    p = ProxyProcess(_tls_config(backends, certs, key="ca-key.pem", instance="pydble-badtls"), name="proxy-badtls",
                     release_ports=True)
    try:
        p.spawn()
        assert p._wait_exit(30)
        p._reap()
        assert p.returncode == 2
        assert "config error: server.ssl_cert: cannot load the certificate and key" in p.log_text()
    finally:
        p.cleanup()
