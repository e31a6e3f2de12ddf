"""The build folder: which files in it edgeship wrote, and how a finished build gets into it.

A build writes nothing into its folder until everything is written. Lowering (or restoring from
the stage cache), the reports, the bundles and results.json go to ``.work/.staged/`` first, laid
out as the folder will be; a failure or a kill before publishing leaves the folder as the last
build left it. ``publish`` then moves the staged files in, by renames:

1. ``.edgeship-incomplete.json``: the new build's key and file list: the folder is changing;
2. the old results.json, reports and bundles go (none of them may describe files about to change);
3. each variant folder is merged: edgeship's earlier files are replaced or removed, any other file
   is kept (and the build says so); a variant folder of an earlier build that this one does not
   have goes only when every file in it is edgeship's, else it stays whole (and the build says so);
4. reports and bundles, then results.json, then the pending-record marker;
5. the incomplete marker is renamed to ``.edgeship-build.json``, the manifest: every file of this
   build with its sha256, the build key, and edgeship's files of earlier builds left in place.

One build at a time: a build holds ``.edgeship-lock`` (an OS file lock, ``locks.FileLock``) from
its plan to its end; a second build into the folder waits for it, or with ``--no-wait`` stops (exit
2). A build that fails or is interrupted removes its ``.work`` and, when it made the folder, the
folder (if nothing else is in it).

So results.json is, at every moment, absent or true to every file it names. Which files are
edgeship's comes from the manifest and an incomplete marker, or in a folder built before manifests
existed, from its results.json (the files it names, their folders' lowering.log, the reports and
edgeship's bundle zips). A file edgeship did not write is never replaced or deleted: one standing
where this build must write is refused (OutputError) before anything moves.
"""
from __future__ import annotations

import contextlib
import json
import os
import zipfile
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from edgeship.devices.hashing import sha256_file
from edgeship.errors import OutputError, listing
from edgeship.fsutil import (
    atomic_write_text,
    confined,
    full_disk_is_write_failure,
    pid_alive,
    remove_path,
    temp_owner,
)
from edgeship.locks import Busy, FileLock, describe
from edgeship.machinekey import machine_key
from edgeship.results import Results

MANIFEST = ".edgeship-build.json"
INCOMPLETE = ".edgeship-incomplete.json"
UNRECORDED = ".edgeship-unrecorded.json"
SIGNATURE = "hmac"  # UNRECORDED's field: this machine's HMAC-SHA256 of the rest (edgeship.machinekey)
WORK = ".work"
STAGED = ".staged"  # variant names start with a letter or digit, so no job folder under .work is called so
LOCK = ".edgeship-lock"
RESULTS = "results.json"
STATE = {MANIFEST, INCOMPLETE, UNRECORDED, WORK, LOCK}  # edgeship's own bookkeeping, never part of a build's files


def report_names() -> tuple[str, ...]:
    from edgeship.reports.make import REPORT_FILES

    return REPORT_FILES


@dataclass
class BuildFiles:
    """A build's manifest: each file (path relative to the folder) with its sha256, the build key,
    and edgeship's files of earlier builds that stay because they sit beside files it did not write."""

    build_key: str | None
    files: dict[str, str]
    earlier: dict[str, str] = field(default_factory=dict)

    def dump(self) -> str:
        return json.dumps({"format": "edgeship-build", "version": 1, "build_key": self.build_key,
                           "files": self.files, "earlier": self.earlier}, indent=1, sort_keys=True) + "\n"

    @classmethod
    def read(cls, path: Path) -> BuildFiles | None:
        """The manifest at ``path``; None when absent or not one of edgeship's."""
        try:
            doc = json.loads(Path(path).read_text())
            files, earlier = dict(doc["files"]), dict(doc.get("earlier") or {})
        except (OSError, ValueError, KeyError, TypeError):
            return None
        if doc.get("format") != "edgeship-build" or not all(isinstance(v, str) for v in [*files.values(),
                                                                                          *earlier.values()]):
            return None
        return cls(doc.get("build_key"), files, earlier)


@dataclass
class Pending:
    """A build the results store could not take: recorded by the next build into the same folder."""

    build_id: str
    database: str
    results: Results


class BuildFolder:
    """One build's output folder (``--out``), and its staging folder under ``.work``."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self.staged = self.root / WORK / STAGED
        self.published = False  # this build's files are in the folder

    # One build at a time.

    @contextlib.contextmanager
    def held(self, wait: bool, say: Callable[[str], None], made: list[Path], clean: bool = True) -> Iterator[None]:
        """The folder for this build alone until the block ends: waits while another build holds it
        (``say`` tells whose), or raises OutputError when ``wait`` is False. A build's (``clean``;
        ``edgeship bundle`` has none) ``.work`` is made new once the folder is held (``own_work``) and goes
        when the block raises; so do the folders it ``made`` (innermost first) when nothing else is in them."""

        def waiting(info: dict[str, Any]) -> None:
            say(f"waiting for the build {describe(info)} that is using {self.root} (--no-wait: stop instead)")
        lock = FileLock(self.root / LOCK, timeout_s=None if wait else 0, on_wait=waiting, remove=True)
        try:
            with full_disk_is_write_failure(self.root / LOCK):
                lock.__enter__()
        except Busy as e:
            raise OutputError(f"{self.root} is in use by another build ({describe(e.holder)}) and --no-wait was "
                              "given; nothing was changed") from None
        try:
            if clean:
                self.own_work()
            yield
        except BaseException:
            if clean:
                remove_path(self.root / WORK)
            raise
        finally:
            lock.__exit__()
            self.remove_made(made)

    def own_work(self) -> None:
        """``.work`` made new, edgeship's own: whatever stood there goes (a killed build's leftovers; a link,
        removed as the link it is, never followed; anything put there), and a new folder only this user may
        enter (mode 0700) takes its place. What the build writes there (the watchdog's stacks, the evaluation
        inputs, the device jobs) then cannot be sent through a link planted in ``--out`` onto another file.
        Nothing outside ``.work`` is touched."""
        work = self.root / WORK
        remove_path(work)  # shutil.rmtree removes the links inside a folder, never what they point to
        try:
            with full_disk_is_write_failure(work):
                os.mkdir(work, 0o700)
        except FileExistsError:
            raise OutputError(f"{work}: edgeship's work folder could not be made new (what is in it could not all be "
                              "removed, or something was put there again at once); remove it and run again") from None

    def abandon(self, made: list[Path]) -> None:
        """What a failed build's ``held`` block does on its way out, for a process that must end without
        leaving it (a watchdog's last resort): its ``.work`` and lock file go, and the folders it ``made``
        when nothing else is in them. The OS lock goes with the process."""
        remove_path(self.root / WORK)
        with contextlib.suppress(OSError):
            (self.root / LOCK).unlink()
        self.remove_made(made)

    @staticmethod
    def remove_made(made: list[Path]) -> None:
        for folder in made:  # innermost first; rmdir leaves a folder that is not empty
            with contextlib.suppress(OSError):
                folder.rmdir()

    # What is here, and whose.

    def manifest(self) -> BuildFiles | None:
        return BuildFiles.read(self.root / MANIFEST)

    def incomplete(self) -> BuildFiles | None:
        return BuildFiles.read(self.root / INCOMPLETE)

    def known(self) -> tuple[set[str], set[str]]:
        """Files edgeship wrote here (relative paths), and the variant folders that only a results.json
        from before manifests knows (where a file this build writes replaces the old one of that name)."""
        docs = [(n, d) for n, d in ((MANIFEST, self.manifest()), (INCOMPLETE, self.incomplete())) if d is not None]
        if docs:
            for source, doc in docs:
                self.refuse_outside(source, [*doc.files, *doc.earlier])
            return {name for _, d in docs for name in (*d.files, *d.earlier)}, set()
        try:
            results = Results.read(self.root / RESULTS)
        except (OSError, ValueError):
            return set(), set()
        known, folders = {RESULTS, *report_names()}, set()
        self.refuse_outside(RESULTS, [r.file or r.name for r in results.variants if not r.is_reference])
        for row in (r for r in results.variants if not r.is_reference):
            folder = (row.file or row.name).split("/")[0]
            folders.add(folder)
            known.add(f"{folder}/lowering.log")
            if row.file:
                known |= set(self.files_under(row.file))
        known |= {p.name for p in self.root.glob("*.zip") if is_bundle(p)}
        return known, folders

    def refuse_outside(self, source: str, names: Iterable[str]) -> None:
        """OutputError when ``source`` (a file of this folder) names a path that leads out of the folder:
        edgeship never wrote one, so it is never deleted, replaced or bundled."""
        bad = [name for name in names if confined(self.root, name) is None]
        if bad:
            raise OutputError(f"{self.root / source}: names {listing(repr(b) for b in bad)}, outside {self.root}; "
                              "edgeship never writes there, so this file was changed by hand or by another tool. "
                              f"Nothing was changed: build into another --out, or remove {self.root / source}")

    def files_under(self, rel: str) -> list[str]:
        """Files (and links) at or under ``rel``, relative to the folder."""
        path = self.root / rel
        if path.is_dir() and not path.is_symlink():
            return sorted(p.relative_to(self.root).as_posix() for p in path.rglob("*")
                          if p.is_file() or p.is_symlink())
        return [rel] if path.exists() or path.is_symlink() else []

    def sha(self, rel: str) -> str | None:
        path = self.root / rel
        return sha256_file(path) if path.is_file() else None

    def conflicts(self, names: Iterable[str]) -> list[str]:
        """Files edgeship did not write that writing ``names`` (relative paths) would replace."""
        known, legacy = self.known()
        out = set()
        for name in names:
            parts = name.split("/")
            for depth in range(1, len(parts)):  # a file where a folder must be
                parent = "/".join(parts[:depth])
                if (self.root / parent).is_file() or (self.root / parent).is_symlink():
                    out |= {parent} - known
            for rel in self.files_under(name):
                if rel not in known and not ("/" in rel and rel.split("/")[0] in legacy):
                    out.add(rel)
        return sorted(out)

    def refuse_conflicts(self, names: Iterable[str]) -> None:
        """OutputError naming the files edgeship did not write that stand where this build writes."""
        found = self.conflicts(names)
        if found:
            raise OutputError(f"{self.root}: this build would overwrite {listing(found)}, which edgeship did not write "
                              f"(not in {MANIFEST}); move it away or build into another --out. Nothing in "
                              f"{self.root} was changed")

    # Staging and publishing.

    def stage(self) -> Path:
        """A fresh, empty staging folder (what a killed build left there goes, and the temporary files
        its atomic writes left in the folder, once their writer is gone)."""
        remove_path(self.staged)
        if self.root.is_dir():
            for item in self.root.iterdir():
                pid = temp_owner(item.name)
                if pid is not None and item.is_file() and not pid_alive(pid):
                    remove_path(item)
        with full_disk_is_write_failure(self.staged):
            self.staged.mkdir(parents=True)
        return self.staged

    def targets(self, variants: list[str]) -> list[str]:
        """What publishing the staged tree replaces: top-level files and each variant folder's entries."""
        out = []
        for item in sorted(self.staged.iterdir()):
            dest = self.root / item.name
            if item.name == UNRECORDED:
                continue
            if item.is_dir() and dest.is_dir() and not dest.is_symlink():
                out += [f"{item.name}/{child.name}" for child in sorted(item.iterdir())]
            else:
                out.append(item.name)
        return out + [v for v in variants if (self.root / v).is_file() or (self.root / v).is_symlink()]

    def publish(self, build_key: str | None, variants: list[str]) -> list[str]:
        """Move the staged build into the folder (see the module's description); what it kept or removed."""
        self.refuse_conflicts(self.targets(variants))
        known, _ = self.known()
        files = {rel: sha256_file(self.staged / rel) for rel in tree(self.staged) if rel != UNRECORDED}
        stale, kept, messages = self._stale_folders(known, variants, files)
        messages += [f"removed {self.root / rel}: an earlier build's, and this build made none" for rel in sorted(known)
                     if "/" not in rel and rel not in STATE and rel not in files and (self.root / rel).is_file()]
        atomic_write_text(self.root / INCOMPLETE, BuildFiles(build_key, files, kept).dump())
        self._retract(known)
        # variant folders, and the other folders the build staged (a web bundle's unpacked site)
        extra = [p.name for p in sorted(self.staged.iterdir()) if p.is_dir() and p.name not in variants]
        for name in variants + extra:
            messages += self._merge_variant(name, known, files)
        for folder in stale:
            remove_path(self.root / folder)
        self._move_top()
        self._seal()
        self.published = True
        remove_path(self.staged)
        return messages

    def _stale_folders(self, known: set[str], variants: list[str],
                       files: dict[str, str]) -> tuple[list[str], dict[str, str], list[str]]:
        """Earlier builds' variant folders this build has not: removable, and edgeship's files kept."""
        remove, kept, messages = [], {}, []
        folders = {rel.split("/")[0] for rel in known if "/" in rel} - set(variants) - STATE - {
            rel.split("/")[0] for rel in files}
        for folder in sorted(folders):
            if not (self.root / folder).is_dir():
                continue
            present = self.files_under(folder)
            strangers = [rel for rel in present if rel not in known]
            if strangers:
                kept.update({rel: self.sha(rel) or "" for rel in present if rel in known})
                messages.append(f"kept {self.root / folder} (from an earlier build): it holds files edgeship did not "
                                f"write ({', '.join(strangers[:5])})")
            else:
                remove.append(folder)
                messages.append(f"removed {self.root / folder}: a variant folder of an earlier build")
        return remove, kept, messages

    def _retract(self, known: set[str]) -> None:
        """Remove the old results.json first, then the old reports and bundles."""
        if RESULTS in known:
            remove_path(self.root / RESULTS)
        for rel in sorted(known):
            if "/" not in rel and rel not in STATE and (self.root / rel).is_file():
                remove_path(self.root / rel)

    def _merge_variant(self, name: str, known: set[str], files: dict[str, str]) -> list[str]:
        """Move a staged variant folder in, keeping files edgeship did not write; edgeship's stale ones go."""
        src, dest = self.staged / name, self.root / name
        if dest.is_file() or dest.is_symlink():
            remove_path(dest)  # edgeship's (checked): a file where the folder goes
        if src.is_dir() and not dest.exists():
            os.rename(src, dest)
        elif src.is_dir():
            for child in sorted(src.iterdir()):
                remove_path(dest / child.name)  # edgeship's (checked)
                os.rename(child, dest / child.name)
        if not dest.is_dir():
            return []
        for rel in sorted(known):
            if rel.startswith(f"{name}/") and rel not in files and (self.root / rel).is_file():
                remove_path(self.root / rel)
                _prune(self.root / rel, dest)
        strangers = [rel for rel in self.files_under(name) if rel not in files and rel not in known]
        if not strangers:
            with contextlib.suppress(OSError):
                dest.rmdir()  # only when this build wrote nothing there and nothing else is left
            return []
        return [f"kept {listing(self.root / rel for rel in strangers)}: not written by edgeship "
                f"(not in {MANIFEST})"]

    def _move_top(self) -> None:
        """Reports and bundles, then results.json, then the pending-record marker."""
        last = [RESULTS, UNRECORDED]
        items = [p for p in sorted(self.staged.iterdir()) if p.is_file()]
        for item in sorted(items, key=lambda p: last.index(p.name) + 1 if p.name in last else 0):
            os.replace(item, self.root / item.name)

    def _seal(self) -> None:
        """The incomplete marker becomes the manifest, in one rename: the folder is whole."""
        os.replace(self.root / INCOMPLETE, self.root / MANIFEST)

    def settle(self, doc: BuildFiles) -> None:
        """After writing the reports and bundles again in place: the manifest with their sha256."""
        for name in {*report_names(), *(n for n in doc.files if "/" not in n and n != RESULTS)}:
            sha = self.sha(name)
            if sha is None:
                doc.files.pop(name, None)
            else:
                doc.files[name] = sha
        atomic_write_text(self.root / MANIFEST, doc.dump())
        remove_path(self.root / INCOMPLETE)

    # A build the results store could not take.

    def stage_pending(self, build_id: str, database: str, results: Results) -> Pending:
        """The build, kept as unrecorded until the store takes it (published with the other files), signed
        by this machine's key: the next build records only what an edgeship here wrote."""
        doc = {"build_id": build_id, "database": database, "results": json.loads(results.dump())}
        doc[SIGNATURE] = machine_key().sign_document(doc)
        atomic_write_text(self.staged / UNRECORDED, json.dumps(doc, indent=1) + "\n")
        return Pending(build_id, database, results)

    def pending(self) -> Pending | None:
        """The build a run kept as unrecorded, when its file is whole and signed by this machine's key
        (an edited or planted one would put numbers nothing measured into the results store)."""
        try:
            doc = json.loads((self.root / UNRECORDED).read_text())
            signature = doc.pop(SIGNATURE, None)
            if not machine_key().verifies_document(doc, signature):
                return None
            return Pending(doc["build_id"], doc["database"], Results.model_validate(doc["results"]))
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            return None

    def clear_pending(self) -> None:
        remove_path(self.root / UNRECORDED)


def tree(folder: Path) -> list[str]:
    """Every file under ``folder``, relative to it."""
    return sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file())


def is_bundle(path: Path) -> bool:
    """A zip whose manifest.json says edgeship made it."""
    try:
        with zipfile.ZipFile(path) as zf:
            doc: object = json.loads(zf.read("manifest.json"))
    except (OSError, ValueError, KeyError, zipfile.BadZipFile):
        return False
    return isinstance(doc, dict) and doc.get("format") == "edgeship-bundle"


def _prune(path: Path, stop: Path) -> None:
    """Remove the empty folders between ``path`` and ``stop`` (not ``stop`` itself)."""
    parent = path.parent
    while parent != stop and stop in parent.parents:
        try:
            parent.rmdir()
        except OSError:
            return
        parent = parent.parent
