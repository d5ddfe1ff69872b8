"""Files over SSH as tar streams on exec channels (no SFTP needed on the remote): one
stream per upload however many files, and one per download.

Uploads are produced by a thread into a small bounded queue, so a large refs/ bundle is
never held in memory; downloads land in a spooled temp file, then are unpacked locally
with tarfile's `data` filter (a remote cannot write outside the destination).
"""

from __future__ import annotations

import hashlib
import io
import os
import queue
import tarfile
import tempfile
import threading
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from fabric import Connection

from remote import channel
from remote.errors import RemoteCommandError, RemoteError


@dataclass(frozen=True)
class Member:
    """One file of an upload: from a local path, or bytes held in memory."""

    name: str  # path inside the archive (relative, POSIX)
    mode: int = 0o644  # 0 for a symlink
    path: Path | None = None
    data: bytes | None = None
    link: str | None = None
    sha256: str | None = None  # expected content of path (from the manifest), checked as sent


class ChangedWhileSending(RemoteError):
    """A local file differs from the manifest it was listed in (edited during the deploy)."""


class _HashingReader:
    def __init__(self, fh):
        self._fh = fh
        self.hash = hashlib.sha256()

    def read(self, n: int = -1) -> bytes:
        data = self._fh.read(n)
        self.hash.update(data)
        return data


def _add_file(tf: tarfile.TarFile, info: tarfile.TarInfo, m: Member) -> None:
    """Add one local file, checking on the way that it is the content the manifest lists
    (a file edited during the deploy must not end up in a release under another hash)."""
    try:
        with open(m.path, "rb") as fh:
            st = os.fstat(fh.fileno())
            info.size = st.st_size
            info.mtime = int(st.st_mtime)
            info.mode = m.mode
            reader = _HashingReader(fh)
            tf.addfile(info, reader)
    except OSError as exc:  # unreadable, or shorter than when it was stat'ed
        raise ChangedWhileSending(f"cannot send {m.name}: {exc}; run the deploy again") from None
    if m.sha256 is not None and reader.hash.hexdigest() != m.sha256:
        raise ChangedWhileSending(
            f"{m.name} changed while it was being sent (edited during the deploy?); nothing "
            f"was switched, run the deploy again"
        )


def tar_chunks(members: Iterable[Member], on_bytes: Callable[[int], None] | None = None,
               chunk: int = 256 * 1024) -> Iterator[bytes]:
    """Yield the bytes of a tar archive of members, built by a helper thread."""
    q: queue.Queue = queue.Queue(maxsize=8)
    stop = threading.Event()
    done = object()

    class _Sink(io.RawIOBase):
        def writable(self) -> bool:
            return True

        def write(self, b) -> int:
            data = bytes(b)
            while not stop.is_set():
                try:
                    q.put(data, timeout=0.2)
                    break
                except queue.Full:
                    continue
            else:
                raise BrokenPipeError("upload abandoned")
            return len(data)

    def produce() -> None:
        try:
            with tarfile.open(fileobj=_Sink(), mode="w|", format=tarfile.PAX_FORMAT, bufsize=chunk) as tf:
                for m in members:
                    info = tarfile.TarInfo(m.name)
                    info.uid = info.gid = 0
                    info.uname = info.gname = ""
                    if m.link is not None:
                        info.type = tarfile.SYMTYPE
                        info.linkname = m.link
                        tf.addfile(info)
                    elif m.data is not None:
                        info.size = len(m.data)
                        info.mode = m.mode
                        tf.addfile(info, io.BytesIO(m.data))
                    else:
                        _add_file(tf, info, m)
            q.put(done)
        except BaseException as exc:  # handed to the consumer, who raises it
            if not stop.is_set():
                q.put(exc)

    producer = threading.Thread(target=produce, name="kdtree-tar-upload", daemon=True)
    producer.start()
    try:
        while True:
            item = q.get()
            if item is done:
                return
            if isinstance(item, BaseException):
                raise item
            if on_bytes:
                on_bytes(len(item))
            yield item
    finally:
        stop.set()


def upload_tar(conn: Connection, command: str, members: Iterable[Member], *, what: str,
               on_bytes: Callable[[int], None] | None = None) -> str:
    """Stream members as a tar into command's stdin; returns its stdout (text)."""
    result = channel.run(conn, command, stdin=tar_chunks(members, on_bytes), what=what, timeout=None)
    if result.exit_code != 0:
        detail = (result.err_text.strip() or result.text.strip())[-2000:]
        raise RemoteCommandError(f"{conn.host}: {what} failed (exit {result.exit_code}): {detail}",
                                 result.exit_code)
    return result.text


def download_tar(conn: Connection, command: str, dest: Path, *, what: str) -> list[str]:
    """Run command (which writes a tar to stdout) and unpack it into dest. Members that
    would land outside dest (absolute paths, '..', escaping links) are skipped and named
    in the returned list of warnings."""
    warnings: list[str] = []
    err = bytearray()
    with tempfile.SpooledTemporaryFile(max_size=16 << 20) as spool:
        code = channel.pump(conn, command, on_out=spool.write, on_err=err.extend, what=what)
        if code != 0:
            raise RemoteCommandError(
                f"{conn.host}: {what} failed (exit {code}): {err.decode('utf-8', 'replace').strip()[-2000:]}",
                code,
            )
        spool.seek(0)
        dest.mkdir(parents=True, exist_ok=True)
        with tarfile.open(fileobj=spool, mode="r|") as tf:
            for member in tf:
                try:
                    tf.extract(member, dest, filter="data")
                except tarfile.FilterError as exc:
                    warnings.append(f"skipped {member.name!r}: {exc}")
    return warnings
