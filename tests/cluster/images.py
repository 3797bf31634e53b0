"""Container images without a registry: OCI image archives written here from files of this machine,
imported into each real node's containerd under the names the manifests use, so a pod's
``imagePullPolicy: IfNotPresent`` finds them and nothing is pulled.

An image is one uncompressed layer (a tar with every owner 0, every time 0, entries sorted: the same
files make the same bytes), its config (entrypoint, environment, user) and a manifest, in an OCI
image layout (``oci-layout``, ``index.json``, ``blobs/sha256/``) packed as a tar that
``ctr images import`` reads, the full name in the index's ``io.containerd.image.name`` annotation.
Archives are cached by the hash of what goes in (``~/.cache/trainium-cluster/images/``), like the
binaries: a second session or worktree writes nothing.

Each stand-in says at its top what it leaves out of the real image (``StandIn.leaves_out``).
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import subprocess
import tarfile
import tempfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from tools.cluster_binaries import cache_root

__all__ = ["Image", "Layer", "image_archive", "shared_libraries"]

_EPOCH = 0


@dataclass
class Layer:
    """The files of one image, by their path inside it (no leading slash)."""

    files: dict[str, Path] = field(default_factory=dict)
    """path in the image -> a file of this machine (its mode kept, its owner 0)."""
    contents: dict[str, tuple[bytes, int]] = field(default_factory=dict)
    """path in the image -> (bytes, mode)."""
    symlinks: dict[str, str] = field(default_factory=dict)
    directories: dict[str, int] = field(default_factory=dict)
    """path -> mode of directories that must exist beyond the parents of files (``tmp``: 0o1777)."""

    def add_tree(self, source: Path, target: str, *, skip: Callable[[Path], bool] = lambda _: False) -> None:
        """Every file and symlink under ``source`` at ``target`` (symlinks kept as links)."""
        for path in sorted(source.rglob("*")):
            if skip(path):
                continue
            inside = f"{target.rstrip('/')}/{path.relative_to(source)}".lstrip("/")
            if path.is_symlink():
                self.symlinks[inside] = os.readlink(path)
            elif path.is_file():
                self.files[inside] = path

    def add_file(self, source: Path, target: str) -> None:
        """``source`` at ``target``, its symlinks followed (the file's bytes, not the link)."""
        self.files[target.lstrip("/")] = source.resolve()

    def digest_input(self) -> str:
        """A hash of everything the layer's bytes depend on (file contents, not their times)."""
        digest = hashlib.sha256()
        for path, source in sorted(self.files.items()):
            digest.update(f"f {path} {source.stat().st_mode & 0o7777:o}\n".encode())
            digest.update(hashlib.sha256(source.read_bytes()).digest())
        for path, (data, mode) in sorted(self.contents.items()):
            digest.update(f"c {path} {mode:o}\n".encode())
            digest.update(hashlib.sha256(data).digest())
        for path, link in sorted(self.symlinks.items()):
            digest.update(f"l {path} {link}\n".encode())
        for path, mode in sorted(self.directories.items()):
            digest.update(f"d {path} {mode:o}\n".encode())
        return digest.hexdigest()

    def write_tar(self, out: io.BufferedWriter) -> None:
        entries: dict[str, tarfile.TarInfo] = {}
        sources: dict[str, Path | bytes] = {}

        def parents(path: str) -> None:
            parts = path.split("/")[:-1]
            for index in range(1, len(parts) + 1):
                directory = "/".join(parts[:index])
                if directory not in entries:
                    entries[directory] = _info(directory, tarfile.DIRTYPE, 0o755)

        for path, mode in self.directories.items():
            parents(path)
            entries[path] = _info(path, tarfile.DIRTYPE, mode)
        for path, source in self.files.items():
            parents(path)
            info = _info(path, tarfile.REGTYPE, source.stat().st_mode & 0o7777)
            info.size = source.stat().st_size
            entries[path], sources[path] = info, source
        for path, (data, mode) in self.contents.items():
            parents(path)
            info = _info(path, tarfile.REGTYPE, mode)
            info.size = len(data)
            entries[path], sources[path] = info, data
        for path, link in self.symlinks.items():
            parents(path)
            info = _info(path, tarfile.SYMTYPE, 0o777)
            info.linkname = link
            entries[path] = info
        with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
            for path in sorted(entries):
                source = sources.get(path)
                if source is None:
                    tar.addfile(entries[path])
                elif isinstance(source, bytes):
                    tar.addfile(entries[path], io.BytesIO(source))
                else:
                    with source.open("rb") as handle:
                        tar.addfile(entries[path], handle)


def _info(path: str, kind: bytes, mode: int) -> tarfile.TarInfo:
    info = tarfile.TarInfo(path)
    info.type = kind
    info.mode = mode
    info.mtime = _EPOCH
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    return info


@dataclass
class Image:
    name: str
    """The full reference the manifests use (``public.ecr.aws/docker/library/alpine:3.24.1``)."""
    layer: Layer
    entrypoint: list[str] | None = None
    cmd: list[str] | None = None
    env: dict[str, str] = field(default_factory=lambda: {"PATH": "/usr/local/bin:/usr/bin:/bin"})
    user: str = ""
    workdir: str = "/"
    leaves_out: str = ""
    """What this stand-in leaves out of the real image (said at the top of its build)."""

    def key(self) -> str:
        digest = hashlib.sha256(self.layer.digest_input().encode())
        digest.update(
            json.dumps([self.name, self.entrypoint, self.cmd, self.env, self.user, self.workdir]).encode()
        )
        return digest.hexdigest()[:16]


def _blob(directory: Path, data: bytes) -> str:
    digest = hashlib.sha256(data).hexdigest()
    (directory / "blobs" / "sha256" / digest).write_bytes(data)
    return f"sha256:{digest}"


def image_archive(image: Image) -> Path:
    """The image's OCI archive in the cache, written if missing (whole or absent: renamed into place)."""
    root = cache_root() / "images"
    safe = image.name.rsplit("/", 1)[-1].replace(":", "-")
    target = root / f"{safe}-{image.key()}.tar"
    if target.is_file():
        return target
    root.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".image-", dir=root) as temporary:
        layout = Path(temporary) / "layout"
        (layout / "blobs" / "sha256").mkdir(parents=True)
        layer_path = Path(temporary) / "layer.tar"
        with layer_path.open("wb") as out:
            image.layer.write_tar(out)
        layer_digest = hashlib.sha256()
        with layer_path.open("rb") as handle:
            for chunk in iter(lambda: handle.read(1 << 20), b""):
                layer_digest.update(chunk)
        layer_id = f"sha256:{layer_digest.hexdigest()}"
        layer_size = layer_path.stat().st_size
        layer_path.rename(layout / "blobs" / "sha256" / layer_digest.hexdigest())
        config: dict[str, object] = {
            "architecture": "amd64",
            "os": "linux",
            "config": {
                "Env": [f"{k}={v}" for k, v in image.env.items()],
                "WorkingDir": image.workdir,
                **({"Entrypoint": image.entrypoint} if image.entrypoint else {}),
                **({"Cmd": image.cmd} if image.cmd else {}),
                **({"User": image.user} if image.user else {}),
            },
            "rootfs": {"type": "layers", "diff_ids": [layer_id]},
        }
        config_bytes = json.dumps(config, sort_keys=True).encode()
        manifest = {
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": {
                "mediaType": "application/vnd.oci.image.config.v1+json",
                "digest": _blob(layout, config_bytes),
                "size": len(config_bytes),
            },
            "layers": [
                {
                    "mediaType": "application/vnd.oci.image.layer.v1.tar",
                    "digest": layer_id,
                    "size": layer_size,
                }
            ],
        }
        manifest_bytes = json.dumps(manifest, sort_keys=True).encode()
        index = {
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.index.v1+json",
            "manifests": [
                {
                    "mediaType": "application/vnd.oci.image.manifest.v1+json",
                    "digest": _blob(layout, manifest_bytes),
                    "size": len(manifest_bytes),
                    "platform": {"architecture": "amd64", "os": "linux"},
                    "annotations": {
                        "io.containerd.image.name": image.name,
                        "org.opencontainers.image.ref.name": image.name.rsplit(":", 1)[-1],
                    },
                }
            ],
        }
        (layout / "index.json").write_text(json.dumps(index, sort_keys=True))
        (layout / "oci-layout").write_text(json.dumps({"imageLayoutVersion": "1.0.0"}))
        archive = Path(temporary) / "image.tar"
        with tarfile.open(archive, "w") as tar:
            for path in sorted(layout.rglob("*")):
                tar.add(path, arcname=str(path.relative_to(layout)), recursive=False)
        archive.rename(target)
    return target


def shared_libraries(binaries: Iterable[Path]) -> dict[str, Path]:
    """Every shared library the binaries load (``ldd``), by its path on this machine, plus the
    dynamic loader: what a layer needs so they run in a container of nothing else."""
    found: dict[str, Path] = {}
    for binary in binaries:
        result = subprocess.run(["ldd", str(binary)], capture_output=True, text=True, check=False)
        for line in result.stdout.splitlines():
            words = line.split()
            path = words[2] if len(words) >= 3 and words[1] == "=>" else words[0] if words else ""
            if path.startswith("/") and Path(path).exists():
                found[path.lstrip("/")] = Path(path)
    return found


def merge(*layers: Layer) -> Layer:
    merged = Layer()
    for layer in layers:
        merged.files.update(layer.files)
        merged.contents.update(layer.contents)
        merged.symlinks.update(layer.symlinks)
        merged.directories.update(layer.directories)
    return merged


__all__ += ["merge"]
