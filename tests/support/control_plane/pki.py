"""The control plane's certificates, made with the ``openssl`` command (Debian's ``openssl``).

One CA signs everything: the API server's serving certificate (loopback and the in-cluster
names of the ``kubernetes`` Service), the webhook servers' serving certificate (loopback: the
API server calls JobSet's and Kueue's webhooks at ``https://127.0.0.1:PORT``), and the client
certificates of the kubeconfigs (organisation ``system:masters`` for the administrator, as
kubeadm's ``admin.conf``). The service-account token signing key is an EC P-256 pair. The keys
live in the cluster's state directory, which ``down`` removes; one copy of the webhook key is
also Kueue's metrics certificate at its fixed path (``cluster.KUEUE_METRICS_CERTS``, mode 0600,
kept: Kueue's metrics server is off, so it is never served).
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

DAYS = "30"


def _openssl(*args: str, cwd: Path) -> None:
    if shutil.which("openssl") is None:
        raise RuntimeError(
            "no `openssl` on PATH: the local control plane's certificates need it (apt-get install openssl)"
        )
    done = subprocess.run(["openssl", *args], cwd=cwd, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"openssl {args[0]} failed: {done.stderr.strip()}")


def _key(name: str, cwd: Path) -> None:
    _openssl("ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out", f"{name}.key", cwd=cwd)


def make_ca(directory: Path) -> None:
    """``ca.crt`` and ``ca.key`` in ``directory``."""
    _key("ca", directory)
    _openssl(
        "req", "-x509", "-new", "-key", "ca.key", "-out", "ca.crt", "-days", DAYS,
        "-subj", "/CN=roxxel-local-cluster-ca", cwd=directory,
    )  # fmt: skip


def make_leaf(
    directory: Path, name: str, *, common_name: str, organisation: str = "", sans: tuple[str, ...] = ()
) -> None:
    """``NAME.crt`` and ``NAME.key`` signed by the CA in ``directory``: a serving certificate
    when ``sans`` are given (``DNS:...`` / ``IP:...``), else a client certificate whose CN and O
    are the Kubernetes user and group."""
    _key(name, directory)
    subject = (f"/O={organisation}" if organisation else "") + f"/CN={common_name}"
    _openssl("req", "-new", "-key", f"{name}.key", "-out", f"{name}.csr", "-subj", subject, cwd=directory)
    usage = "serverAuth" if sans else "clientAuth"
    lines = [
        "basicConstraints=CA:FALSE",
        "keyUsage=critical,digitalSignature,keyEncipherment",
        f"extendedKeyUsage={usage}",
    ]
    if sans:
        lines.append("subjectAltName=" + ",".join(sans))
    (directory / f"{name}.ext").write_text("\n".join(lines) + "\n")
    _openssl(
        "x509", "-req", "-in", f"{name}.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
        "-out", f"{name}.crt", "-days", DAYS, "-extfile", f"{name}.ext", cwd=directory,
    )  # fmt: skip


def make_all(directory: Path) -> None:
    """Every certificate and key the control plane uses, in ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    make_ca(directory)
    make_leaf(
        directory,
        "apiserver",
        common_name="kube-apiserver",
        sans=(
            "IP:127.0.0.1",
            "IP:10.96.0.1",
            "DNS:localhost",
            "DNS:kubernetes",
            "DNS:kubernetes.default",
            "DNS:kubernetes.default.svc",
            "DNS:kubernetes.default.svc.cluster.local",
        ),
    )
    make_leaf(directory, "webhooks", common_name="roxxel-local-webhooks", sans=("IP:127.0.0.1", "DNS:localhost"))
    make_leaf(directory, "admin", common_name="roxxel-admin", organisation="system:masters")
    _key("sa", directory)
    _openssl("ec", "-in", "sa.key", "-pubout", "-out", "sa.pub", cwd=directory)
    for leftover in directory.glob("*.csr"):
        leftover.unlink()
