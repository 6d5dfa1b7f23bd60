"""The exporter's TLS context (exporter/tls.py) read directly: each refusal's words name the
setting and the file, and a good pair makes a TLS 1.2+ server context."""

from __future__ import annotations

import os
import ssl
from pathlib import Path

import pytest

from exporter import tls
from exporter.config import ConfigError
from exporter.tls import check_pem, server_context

HERE = Path(__file__).parent
CERT = str(HERE / "test_exporter_tls.crt")
KEY = str(HERE / "test_exporter_tls.key")
OTHER_KEY = str(HERE / "test_exporter_tls_renewed.key")  # the renewed certificate's
PASSPHRASE_KEY = str(HERE / "test_exporter_tls_passphrase.key")


def _refusal(key: str, path: str, private: bool) -> str:
    with pytest.raises(ConfigError) as refused:
        check_pem(key, path, private=private)
    return str(refused.value)


def test_good_files_pass_and_make_a_tls12_server_context() -> None:
    check_pem("web.tls_cert_file", CERT, private=False)
    check_pem("web.tls_key_file", KEY, private=True)
    context = server_context(CERT, KEY)
    assert isinstance(context, ssl.SSLContext)
    assert context.protocol == ssl.PROTOCOL_TLS_SERVER
    assert context.minimum_version == ssl.TLSVersion.TLSv1_2


def test_a_missing_file_names_the_setting_the_file_and_what_it_should_hold(
        tmp_path: Path) -> None:
    missing = str(tmp_path / "nope.pem")
    assert _refusal("web.tls_cert_file", missing, private=False) == (
        f"web.tls_cert_file: {missing}: cannot load TLS certificate: No such file or directory")
    assert _refusal("web.tls_key_file", missing, private=True) == (
        f"web.tls_key_file: {missing}: cannot load TLS key: No such file or directory")


def test_a_fifo_or_a_directory_is_refused_without_opening_it_for_good(tmp_path: Path) -> None:
    fifo = tmp_path / "cert.pem"
    os.mkfifo(fifo)
    assert _refusal("web.tls_cert_file", str(fifo), private=False) == (
        f"web.tls_cert_file: {fifo}: cannot load TLS certificate: not a regular file")
    assert _refusal("web.tls_key_file", str(tmp_path), private=True) == (
        f"web.tls_key_file: {tmp_path}: cannot load TLS key: not a regular file")


def test_a_file_that_is_not_pem_is_refused_as_such(tmp_path: Path) -> None:
    der = tmp_path / "cert.der"
    der.write_text("MIIB just base64, no armour\n")
    assert _refusal("web.tls_cert_file", str(der), private=False) == (
        f"web.tls_cert_file: {der}: not a PEM file")


def test_a_key_protected_by_a_passphrase_is_refused_by_name_in_both_formats(
        tmp_path: Path) -> None:
    words = "protected by a passphrase, which the exporter cannot be given"
    assert words in _refusal("web.tls_key_file", PASSPHRASE_KEY, private=True)
    legacy = tmp_path / "legacy.key"  # the traditional format's header
    legacy.write_text("-----BEGIN RSA PRIVATE KEY-----\nProc-Type: 4,ENCRYPTED\n"
                      "DEK-Info: AES-128-CBC,00\n\nAAAA\n-----END RSA PRIVATE KEY-----\n")
    assert _refusal("web.tls_key_file", str(legacy), private=True).startswith(
        f"web.tls_key_file: {legacy}: {words}")
    # Only keys are asked: a certificate file with those words is not refused for them.
    check_pem("web.tls_cert_file", PASSPHRASE_KEY, private=False)
    check_pem("web.tls_cert_file", str(legacy), private=False)


def test_a_long_path_is_cut_in_the_words(tmp_path: Path) -> None:
    long = str(tmp_path / ("d" * 200) / "cert.pem")
    words = _refusal("web.tls_cert_file", long, private=False)
    assert words.startswith(f"web.tls_cert_file: {long[:117]}...: cannot load TLS certificate")
    assert long not in words


def test_the_first_bad_file_is_named_the_certificate_before_the_key(tmp_path: Path) -> None:
    missing = str(tmp_path / "gone.pem")
    with pytest.raises(ConfigError, match=r"^web\.tls_cert_file: "):
        server_context(missing, missing)
    with pytest.raises(ConfigError, match=r"^web\.tls_key_file: "):
        server_context(CERT, missing)
    with pytest.raises(ConfigError, match=r"^web\.tls_key_file: None: "):
        server_context(CERT, None)


def test_a_key_that_does_not_match_the_certificate_names_both() -> None:
    with pytest.raises(ConfigError) as refused:
        server_context(CERT, OTHER_KEY)
    assert str(refused.value).startswith(
        f"cannot load TLS certificate {CERT} / key {OTHER_KEY}: ")


def test_openssl_asking_for_a_passphrase_is_refused_not_prompted(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # A passphrase key the text check missed: OpenSSL's question gets a refusal, not a prompt.
    monkeypatch.setattr(tls, "check_pem", lambda key, path, private: None)
    with pytest.raises(ConfigError) as refused:
        server_context(CERT, PASSPHRASE_KEY)
    assert str(refused.value) == (
        f"cannot load TLS certificate {CERT} / key {PASSPHRASE_KEY}: the key is protected by "
        "a passphrase; store it unencrypted")


def test_long_paths_are_cut_in_the_words_of_a_pair_that_does_not_load(tmp_path: Path) -> None:
    deep = tmp_path / ("d" * 150)
    deep.mkdir()
    cert, key = deep / "cert.pem", deep / "other.key"
    cert.write_text(Path(CERT).read_text())
    key.write_text(Path(OTHER_KEY).read_text())
    with pytest.raises(ConfigError) as refused:
        server_context(str(cert), str(key))
    words = str(refused.value)
    assert words.startswith(f"cannot load TLS certificate {str(cert)[:117]}... / key "
                            f"{str(key)[:117]}...: ")


def test_a_passphrase_key_is_refused_by_the_text_check_naming_the_key_setting() -> None:
    with pytest.raises(ConfigError) as refused:
        server_context(CERT, PASSPHRASE_KEY)
    assert str(refused.value).startswith(
        f"web.tls_key_file: {PASSPHRASE_KEY}: protected by a passphrase")


def test_a_certificate_file_that_also_holds_an_encrypted_key_is_a_certificate(
        tmp_path: Path) -> None:
    # A bundle: the certificate, then (never read as the key) an encrypted key's block.
    bundle = tmp_path / "bundle.pem"
    bundle.write_text(Path(CERT).read_text() + Path(PASSPHRASE_KEY).read_text())
    context = server_context(str(bundle), KEY)
    assert context.minimum_version == ssl.TLSVersion.TLSv1_2
