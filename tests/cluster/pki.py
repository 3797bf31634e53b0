"""Certificates and keys for a control plane on loopback, made with the openssl command line
(``cryptography`` is not in the development lock). Short-lived: they live as long as the test session."""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

__all__ = ["CertificateAuthority", "KeyPair", "service_account_keys"]

_DAYS = "2"


@dataclass(frozen=True)
class KeyPair:
    cert: Path
    key: Path


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


@dataclass(frozen=True)
class CertificateAuthority:
    directory: Path
    name: str

    @property
    def cert(self) -> Path:
        return self.directory / f"{self.name}.crt"

    @property
    def key(self) -> Path:
        return self.directory / f"{self.name}.key"

    @staticmethod
    def create(directory: Path, name: str) -> CertificateAuthority:
        directory.mkdir(parents=True, exist_ok=True)
        ca = CertificateAuthority(directory, name)
        _openssl(
            "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
            "-keyout", ca.key.name, "-out", ca.cert.name, "-days", _DAYS, "-subj", f"/CN={name}",
            "-addext", "basicConstraints=critical,CA:TRUE",
            "-addext", "keyUsage=critical,keyCertSign,cRLSign,digitalSignature",
            cwd=directory,
        )  # fmt: skip
        return ca

    def issue(
        self,
        name: str,
        *,
        common_name: str,
        organizations: Sequence[str] = (),
        dns: Sequence[str] = (),
        ips: Sequence[str] = (),
    ) -> KeyPair:
        """A certificate for a server (``dns``/``ips`` given) or a client (CN = user, O = groups)."""
        subject = "".join(f"/O={org}" for org in organizations) + f"/CN={common_name}"
        key, csr, cert = (self.directory / f"{name}.{ext}" for ext in ("key", "csr", "crt"))
        _openssl(
            "req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
            "-keyout", key.name, "-out", csr.name, "-subj", subject,
            cwd=self.directory,
        )  # fmt: skip
        extensions = ["keyUsage=critical,digitalSignature,keyEncipherment"]
        if dns or ips:
            names = [f"DNS:{d}" for d in dns] + [f"IP:{ip}" for ip in ips]
            extensions += ["extendedKeyUsage=serverAuth,clientAuth", f"subjectAltName={','.join(names)}"]
        else:
            extensions.append("extendedKeyUsage=clientAuth")
        extfile = self.directory / f"{name}.ext"
        extfile.write_text("\n".join(extensions) + "\n")
        _openssl(
            "x509", "-req", "-in", csr.name, "-CA", self.cert.name, "-CAkey", self.key.name,
            "-CAcreateserial", "-out", cert.name, "-days", _DAYS, "-extfile", extfile.name,
            cwd=self.directory,
        )  # fmt: skip
        return KeyPair(cert=cert, key=key)


def service_account_keys(directory: Path) -> KeyPair:
    """The key the API server signs service-account tokens with (``cert`` holds its public half)."""
    directory.mkdir(parents=True, exist_ok=True)
    _openssl(
        "genpkey", "-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048", "-out", "sa.key", cwd=directory
    )
    _openssl("pkey", "-in", "sa.key", "-pubout", "-out", "sa.pub", cwd=directory)
    return KeyPair(cert=directory / "sa.pub", key=directory / "sa.key")
