"""The HTTP client of servers added over the API, against real sockets on 127.0.0.1: each connection is checked as
it opens and goes to the checked address; TLS still verifies the certificate for, and sends as SNI, the URL's host
name, and the Host header stays that name.

There is no DNS server to control here, so DNS answers are simulated by patching `service.upstream.urls.resolve`,
the one resolver the client calls. `upstream.test` resolves nowhere else: reaching the server under that name
shows the connection went to the checked address."""

from __future__ import annotations

import asyncio
import ipaddress
import ssl
from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx2
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
from mcp.shared._httpx_utils import create_mcp_http_client

from service.upstream import urls
from service.upstream.checked_http import checked_http_client

LOOPBACK = ipaddress.ip_address("127.0.0.1")


class Recorder:
    """A one-answer HTTP/1.1 server: counts connections, keeps request heads and the SNI names it was sent."""

    def __init__(self) -> None:
        self.connections = 0
        self.heads: list[str] = []
        self.server_names: list[str | None] = []

    async def answer(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        self.heads.append((await reader.readuntil(b"\r\n\r\n")).decode().lower())
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok")
        await writer.drain()
        writer.close()


@asynccontextmanager
async def serving(tls: ssl.SSLContext | None = None) -> AsyncIterator[tuple[int, Recorder]]:
    recorder = Recorder()
    if tls is not None:
        tls.sni_callback = lambda _socket, name, _context: recorder.server_names.append(name)
    server = await asyncio.start_server(recorder.answer, "127.0.0.1", 0, ssl=tls)
    async with server:
        yield server.sockets[0].getsockname()[1], recorder


def dns(monkeypatch: pytest.MonkeyPatch, *answers: Iterable[str] | OSError) -> None:
    """The DNS answers the next queries get, in order (the last one repeats)."""
    remaining = list(answers)

    async def resolve(host: str, port: int) -> list[urls.IpAddress]:
        answer = remaining.pop(0) if len(remaining) > 1 else remaining[0]
        if isinstance(answer, OSError):
            raise answer
        return [ipaddress.ip_address(address) for address in answer]

    monkeypatch.setattr(urls, "resolve", resolve)


def tls_pair(tmp_path: Path, name: str) -> tuple[ssl.SSLContext, ssl.SSLContext]:
    """A server context with a certificate for `name` from a throwaway CA, and a client context trusting it."""
    now = datetime.now(UTC)
    ca_key, key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "Toolscout test CA")])

    def builder(subject: x509.Name, public_key: ec.EllipticCurvePublicKey) -> x509.CertificateBuilder:
        return (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(ca_name)
            .public_key(public_key)
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - timedelta(minutes=5))
            .not_valid_after(now + timedelta(days=1))
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(public_key), critical=False)
        )

    signs_certificates = x509.KeyUsage(
        digital_signature=False,
        content_commitment=False,
        key_encipherment=False,
        data_encipherment=False,
        key_agreement=False,
        key_cert_sign=True,
        crl_sign=True,
        encipher_only=False,
        decipher_only=False,
    )
    ca = (
        builder(ca_name, ca_key.public_key())
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(signs_certificates, critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    leaf = (
        builder(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]), key.public_key())
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(name)]), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    cert_file, key_file = tmp_path / "leaf.pem", tmp_path / "leaf.key"
    cert_file.write_bytes(leaf.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server.load_cert_chain(cert_file, key_file)
    client = ssl.create_default_context(cadata=ca.public_bytes(serialization.Encoding.PEM).decode())
    return server, client


async def test_each_connection_is_checked_as_it_opens_and_keeps_the_host_name(monkeypatch: pytest.MonkeyPatch) -> None:
    dns(monkeypatch, ["127.0.0.1"], ["10.0.0.1"])  # the name answers 127.0.0.1, then a private address
    async with serving() as (port, recorder):
        async with checked_http_client({"X-Trace": "1"}, ["127.0.0.1"], "each") as http:
            first = await http.get(f"http://upstream.test:{port}/mcp")
            refused = "refused to connect to upstream.test:.*: host 'upstream.test' resolves to an internal address"
            with pytest.raises(httpx2.ConnectError, match=rf"{refused} \(10\.0\.0\.1\)"):
                await http.get(f"http://upstream.test:{port}/mcp")  # the server closed the first connection
    assert first.text == "ok" and recorder.connections == 1
    assert f"host: upstream.test:{port}\r\n" in recorder.heads[0] and "x-trace: 1\r\n" in recorder.heads[0]


@pytest.mark.parametrize(
    ("answer", "allowed"),
    [
        (["127.0.0.1"], []),
        (["93.184.215.14", "127.0.0.1"], []),  # one internal address is enough, as for the URL check
        (["::ffff:127.0.0.1"], []),
        (["169.254.169.254"], ["10.0.0.0/8"]),
        (OSError("no such name"), ["*"]),
    ],
    ids=["loopback", "one of two", "mapped", "metadata", "no answer"],
)
async def test_refused_answers_open_no_connection(
    monkeypatch: pytest.MonkeyPatch, answer: list[str] | OSError, allowed: list[str]
) -> None:
    dns(monkeypatch, answer)
    async with serving() as (port, recorder):
        async with checked_http_client({}, allowed, "refused") as http:
            with pytest.raises(httpx2.ConnectError, match="refused to connect|does not resolve"):
                await http.get(f"http://upstream.test:{port}/mcp")
    assert recorder.connections == 0


async def test_the_next_checked_address_is_tried_when_one_refuses(monkeypatch: pytest.MonkeyPatch) -> None:
    dns(monkeypatch, ["127.0.0.2", "127.0.0.1"])  # nothing listens on 127.0.0.2
    async with serving() as (port, recorder):
        async with checked_http_client({}, ["127.0.0.0/8"], "fallback") as http:
            response = await http.get(f"http://upstream.test:{port}/mcp")
    assert response.text == "ok" and recorder.connections == 1


async def test_tls_verifies_the_certificate_of_the_host_name_and_sends_it_as_sni(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    dns(monkeypatch, ["127.0.0.1"])
    server_tls, client_tls = tls_pair(tmp_path, "upstream.test")
    async with serving(server_tls) as (port, recorder):
        async with checked_http_client({}, ["127.0.0.1"], "tls", ssl_context=client_tls) as http:
            response = await http.get(f"https://upstream.test:{port}/mcp")
    assert response.text == "ok"
    assert recorder.server_names == ["upstream.test"]
    assert f"host: upstream.test:{port}\r\n" in recorder.heads[0]


async def test_tls_refuses_a_certificate_for_another_name(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    dns(monkeypatch, ["127.0.0.1"])
    server_tls, client_tls = tls_pair(tmp_path, "other.test")
    async with serving(server_tls) as (port, recorder):
        async with checked_http_client({}, ["127.0.0.1"], "tls", ssl_context=client_tls) as http:
            with pytest.raises(httpx2.ConnectError, match="certificate verify failed"):
                await http.get(f"https://upstream.test:{port}/mcp")
    assert recorder.server_names == ["upstream.test"] and recorder.heads == []


async def test_the_client_keeps_the_sdk_timeouts() -> None:
    async with checked_http_client({}, [], "timeouts") as checked, create_mcp_http_client() as sdk:
        assert checked.timeout == sdk.timeout
