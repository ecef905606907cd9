"""One writer per output folder: an exclusive `flock` on `FOLDER/.fasttts.lock`, a file
holding the writer's pid.

A second process that asks for the lock is refused at once with one line naming the holder's
pid. The kernel drops a `flock` when its process dies (`kill -9`, a crash), so a lock file
left behind is stale and the next writer simply takes it over. Within one process the lock is
shared: asking again for a folder it already holds counts one more holder, and the lock is
let go when the last one releases it. On release the lock file is removed, and the folder
too when the lock created it and nothing else was written there.
"""

from __future__ import annotations

import fcntl
import os
import threading
from pathlib import Path

__all__ = ["FolderInUse", "FolderLock", "LOCK_NAME"]

#: The lock file's name inside the folder.
LOCK_NAME = ".fasttts.lock"

#: folder (resolved) -> [file descriptor holding the flock, holders in this process, the
#: highest folder the lock created (None: the folder existed)]
_HELD: dict[Path, list] = {}
_HELD_LOCK = threading.Lock()


class FolderInUse(ValueError):
    """Another process writes to the folder (the message names its pid)."""


def _lock_file(folder: Path, hint: str) -> int:
    """A descriptor of `folder`'s lock file with the flock taken, the file holding this pid.

    Raises:
        FolderInUse: another process holds the lock.
    """
    path = folder / LOCK_NAME
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.read(fd, 32).decode("ascii", "replace").strip() or "unknown"
            os.close(fd)
            raise FolderInUse(f"{folder} is being written by another process (pid {holder}, "
                              f"lock file {path}); wait for it to finish, or use another "
                              f"{hint}") from None
        try:
            same = os.stat(path).st_ino == os.fstat(fd).st_ino
        except FileNotFoundError:
            same = False
        if same:  # else the holder removed it as we opened it: lock the new file
            break
        os.close(fd)
    os.ftruncate(fd, 0)
    os.write(fd, f"{os.getpid()}\n".encode())
    return fd


class FolderLock:
    """The writer's lock on one folder (module docstring); a context manager.

    Args:
        folder: the folder (created when missing, with its parents).
        hint: the option that chooses the folder, for the error (e.g. "--output-dir").

    Raises:
        FolderInUse: another process holds the lock (from `acquire`).
        OSError: the folder or its lock file cannot be created.
    """

    def __init__(self, folder: str | os.PathLike, hint: str = "folder"):
        self.folder = Path(folder)
        self.hint = hint
        self._key: Path | None = None

    def acquire(self) -> FolderLock:
        """Take the lock (once per object; again after `release`)."""
        if self._key is not None:
            return self
        with _HELD_LOCK:
            missing = [p for p in (self.folder, *self.folder.parents) if not p.exists()]
            created = missing[-1].resolve() if missing else None
            self.folder.mkdir(parents=True, exist_ok=True)
            key = self.folder.resolve()
            held = _HELD.get(key)
            if held is None:
                try:
                    held = _HELD[key] = [_lock_file(self.folder, self.hint), 0, created]
                except BaseException:
                    _remove_created(key, created)
                    raise
            held[1] += 1
            self._key = key
        return self

    def release(self) -> None:
        """Let go of the lock; the last holder in this process removes the lock file (and the
        folder, when the lock created it and it is empty)."""
        with _HELD_LOCK:
            key, self._key = self._key, None
            held = _HELD.get(key) if key is not None else None
            if held is None:
                return
            held[1] -= 1
            if held[1] > 0:
                return
            del _HELD[key]
            try:
                (key / LOCK_NAME).unlink()
            except OSError:
                pass
            os.close(held[0])
            _remove_created(key, held[2])

    def __enter__(self) -> FolderLock:
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()


def _remove_created(folder: Path, top: Path | None) -> None:
    """Remove `folder` and its parents up to `top` (the highest one the lock created) while
    they are empty; nothing when `top` is None."""
    if top is None:
        return
    for path in (folder, *folder.parents):
        try:
            path.rmdir()
        except OSError:
            return  # not empty: results were written
        if path == top:
            return
