"""Atomic file output: a reader sees the old file or the whole new one, never half of one. Private
folders: state edgeship keeps outside ``--out`` that no other local user may plant or read.

Temporary names carry the writer's pid (``.<stem>.tmp-<pid>-<random><suffix>``), so a later run
can tell a leftover of a killed writer (its pid gone) from a file another live build is writing.
A full disk (ENOSPC, a quota: EDQUOT, the file size limit: EFBIG) while writing is a
``WriteFailure`` (exit 1) naming the file, the bytes it needed when known and the bytes free; the
temporary file is removed and the previous file stays as it was.
"""
from __future__ import annotations

import contextlib
import errno
import os
import re
import shutil
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path, PurePosixPath

from edgeship.errors import OutputError, WriteFailure

NO_SPACE = {errno.ENOSPC, errno.EDQUOT, errno.EFBIG}  # EFBIG: past the file size limit (ulimit -f)
TEMP_NAME = re.compile(r"^\..*\.tmp-(?P<pid>\d+)-[A-Za-z0-9_]+")


@contextlib.contextmanager
def atomic_output(dest: Path, size: int | None = None) -> Iterator[Path]:
    """Yield a temporary path beside ``dest``; on success it replaces ``dest`` (file or folder).

    ``size``: the bytes about to be written, when known, for the message on a full disk.
    """
    dest = Path(dest)
    refuse_special(dest)
    with full_disk_is_write_failure(dest, size):
        dest.parent.mkdir(parents=True, exist_ok=True)
    # The temporary name keeps the suffix: some writers insist on it (a package folder's converter checks it).
    fd, name = tempfile.mkstemp(prefix=f".{dest.stem}.tmp-{os.getpid()}-", suffix=dest.suffix, dir=dest.parent)
    os.close(fd)
    tmp = Path(name)
    tmp.unlink()  # the writer creates it (a file or a folder, as it needs)
    try:
        with full_disk_is_write_failure(dest, size):
            yield tmp
            refuse_special(dest)
            if dest.is_dir() and not dest.is_symlink():
                shutil.rmtree(dest)
            os.replace(tmp, dest)
    finally:
        remove_path(tmp)


def refuse_special(dest: Path) -> None:
    """OutputError (exit 2) when ``dest`` is a device, a pipe or a socket: a rename over it would put a
    file in its place (as root, ``/dev/null`` itself), and nothing edgeship writes belongs there."""
    try:
        mode = os.lstat(dest).st_mode
    except (FileNotFoundError, NotADirectoryError):
        return
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) or stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode):
        kind = ("a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else
                "a named pipe" if stat.S_ISFIFO(mode) else "a socket")
        raise OutputError(f"{dest}: is {kind}, not a file edgeship may replace; name a file or a folder")


@contextlib.contextmanager
def atomic_output_named(dest: Path) -> Iterator[Path]:
    """``atomic_output`` for writers that record the file's own name inside it: the writer gets a path
    with ``dest``'s exact name, in a temporary folder beside it. torch.jit's archives (``.pt``,
    ``.ptl``) are zips rooted in a folder named after the file: written under a temporary name, that
    folder was the temporary name (their bytes differ between saves anyway: torch writes a random
    serialization id into each)."""
    dest = Path(dest)
    with atomic_output(dest) as tmp:
        work = Path(tempfile.mkdtemp(prefix=f".{dest.stem}.tmp-{os.getpid()}-", dir=dest.parent))
        try:
            named = work / dest.name
            yield named
            os.replace(named, tmp)
        finally:
            shutil.rmtree(work, ignore_errors=True)


def atomic_write_bytes(dest: Path, data: bytes) -> None:
    """Write ``data`` to ``dest`` atomically (WriteFailure naming it when the disk is full)."""
    with atomic_output(dest, size=len(data)) as tmp:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            os.fsync(fd)
        finally:
            os.close(fd)


def atomic_write_text(dest: Path, text: str) -> None:
    """Write ``text`` (UTF-8) to ``dest`` atomically."""
    atomic_write_bytes(dest, text.encode("utf-8"))


@contextlib.contextmanager
def full_disk_is_write_failure(dest: Path, size: int | None = None, own_name: bool = False) -> Iterator[None]:
    """Turn a full disk (ENOSPC, EDQUOT, EFBIG) inside the block into a WriteFailure naming ``dest`` (with
    ``own_name``: the file the error names, when it names one)."""
    try:
        yield
    except OSError as e:
        if e.errno in NO_SPACE:
            raise no_space_error(Path(e.filename if own_name and e.filename else dest), size, e.errno) from e
        raise


def no_space_error(dest: Path, size: int | None = None, code: int = errno.ENOSPC) -> WriteFailure:
    """The message for a disk that filled up (or a file past the size limit, EFBIG) while writing ``dest``."""
    needed = f"{size:,} bytes to write" if size is not None else "size not known in advance"
    if code == errno.EFBIG:
        return WriteFailure(f"{dest}: the file size limit was reached while writing it ({needed}; ulimit -f / "
                            "RLIMIT_FSIZE); nothing half-written was kept and the previous file, if any, is "
                            "unchanged: raise the limit and run again")
    free = free_bytes(dest)
    room = f"; {free:,} bytes free there" if free is not None else ""
    return WriteFailure(f"{dest}: no space left on the device while writing it ({needed}{room}); nothing "
                        "half-written was kept and the previous file, if any, is unchanged: free some space "
                        "and run again")


def confined(root: Path, rel: str) -> Path | None:
    """``root / rel`` when ``rel`` (read from a file: a manifest, a results.json) is a relative path
    without ``..`` whose folders, symlinks resolved, stay inside ``root``; None when it would lead
    out (then edgeship neither deletes, copies nor signs it)."""
    parts = PurePosixPath(rel).parts
    if not rel or PurePosixPath(rel).is_absolute() or ".." in parts or "\0" in rel:
        return None
    path = Path(root).joinpath(*parts)
    base, parent = Path(root).resolve(), path.parent.resolve()
    return path if parent == base or base in parent.parents else None


def byte_count(n: int) -> str:
    """``1,234,567 bytes (1.2 MiB)``: exact, and readable from a MiB on."""
    return f"{n:,} bytes" + (f" ({n / (1 << 40):.1f} TiB)" if n >= 1 << 40 else
                             f" ({n / (1 << 30):.1f} GiB)" if n >= 1 << 30 else
                             f" ({n / (1 << 20):.1f} MiB)" if n >= 1 << 20 else "")


def free_bytes(path: Path) -> int | None:
    """Free bytes on the file system holding ``path`` (or its nearest existing parent)."""
    existing = Path(path)
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    try:
        return shutil.disk_usage(existing).free
    except OSError:
        return None


def temp_owner(name: str) -> int | None:
    """The pid in an :func:`atomic_output` temporary name, or None for any other name."""
    match = TEMP_NAME.match(name)
    return int(match["pid"]) if match else None


def pid_alive(pid: int) -> bool:
    """Whether a process ``pid`` runs on this machine (another user's counts as running)."""
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def remove_path(path: Path) -> None:
    """Remove a file or a folder tree, if there."""
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()


def tree_size(path: Path) -> int:
    """Bytes in a file, or in every file under a folder (an .mlpackage is a folder)."""
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def new_private_folder(prefix: str, parent: Path | None = None) -> Path:
    """A new folder only this user can enter, for state outside ``--out`` (ssh control sockets, device
    work folders): a random name that did not exist before (``mkdtemp``) and mode 0700, under ``parent``
    (default: the temporary folder). Another local user cannot have made it first, as they can a
    fixed name in a shared ``/tmp``."""
    return Path(tempfile.mkdtemp(prefix=prefix, dir=parent))


def private_folder(path: Path, what: str) -> Path:
    """``path``, a folder of a fixed name that holds state edgeship trusts (device locks, the Arm root,
    Inductor's cache), made with mode 0700 when missing. An existing one is used only when no other
    user can have put anything in it (``folder_problem``), else an OutputError (exit 2) names it and
    what ``what`` is; one of this user's that others may only read (0755, as an older edgeship made
    it) is narrowed to 0700."""
    path = Path(path).absolute()
    with contextlib.suppress(FileExistsError):
        path.parent.mkdir(parents=True, exist_ok=True)
        os.mkdir(path, 0o700)  # in a shared folder, someone else's folder of that name makes this fail
    problem = folder_problem(path)
    if problem:
        raise OutputError(f"{what} {path}: {problem}, so another user could have put files there that edgeship "
                          "would trust; edgeship uses only a real folder, owned by you, that nobody else can write "
                          "to (mode 0700): remove it, or `chmod 700` it if only you ever wrote there")
    narrow_own_folder(path)
    return path


def narrow_own_folder(path: Path) -> None:
    """Mode 0700 on ``path`` when it is this user's folder and others may read it: changed through a
    descriptor opened without following a link, so a folder swapped for a link after the check is
    never what is changed."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except OSError as e:
        raise OutputError(f"{path}: changed while edgeship checked it ({e.strerror}); run again") from None
    try:
        st = os.fstat(fd)
        if st.st_mode & 0o077 and st.st_uid == os.geteuid():
            os.fchmod(fd, 0o700)
    finally:
        os.close(fd)


def folder_problem(path: Path) -> str | None:
    """Why another local user could control the folder ``path`` (a symbolic link, not a folder, owned by
    someone other than this user or root, writable by its group or by everyone, or in a folder where
    anyone may rename it away), or None. A missing folder is a problem too."""
    path = Path(path).absolute()
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return "does not exist"
    mode = stat.S_IMODE(st.st_mode)
    if stat.S_ISLNK(st.st_mode):
        return "is a symbolic link"
    if not stat.S_ISDIR(st.st_mode):
        return "is not a folder"
    if st.st_uid not in (os.geteuid(), 0):
        return f"is owned by {owner_name(st.st_uid)}, not by you"
    if mode & 0o022:
        return f"is writable by {'everyone' if mode & 0o002 else 'its group'} (mode {mode:04o})"
    parent = os.stat(path.parent).st_mode
    if parent & 0o002 and not parent & stat.S_ISVTX:
        return f"is in {path.parent}, where anyone may rename it (mode {stat.S_IMODE(parent):04o}, no sticky bit)"
    return None


def owner_name(uid: int) -> str:
    """``nobody (uid 65534)``, or ``uid 1234`` for a uid without a name."""
    import pwd

    try:
        return f"{pwd.getpwuid(uid).pw_name} (uid {uid})"
    except KeyError:
        return f"uid {uid}"


@contextlib.contextmanager
def working_folder(folder: Path | str) -> Iterator[None]:
    """The block runs with ``folder`` as the process's working folder, then back where it was (for
    Python 3.10, which has no ``contextlib.chdir``)."""
    before = os.getcwd()
    os.chdir(folder)
    try:
        yield
    finally:
        os.chdir(before)
