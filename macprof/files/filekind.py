"""Files are what they claim before anything opens, reads or hashes them: a FIFO would block
open() forever, /dev/zero would hash forever, a socket cannot be read at all. Model files are
checked when models.toml is read and again just before a file is read (it can change in between).

Every file macprof reads whole on a user's word (a task file, a chat template, a models.toml, a
model's config.json or tokenizer_config.json, a quality text, a run log or journal) goes through
``read_regular`` (``read_text`` for text): its mode is checked before anything can block, and at
most its cap and one byte are read, whatever size the file system reports."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from macprof.errors import MacprofError

# O_NONBLOCK: opening a FIFO that slipped past the stat check returns at once instead of
# waiting for a writer; fstat then refuses it. It changes nothing for regular files.
_OPEN_FLAGS = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0) | getattr(os, "O_CLOEXEC", 0)


def describe(mode: int) -> str:
    for test, what in ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device")):
        if test(mode):
            return what
    return "a regular file" if stat.S_ISREG(mode) else "not a file, directory or device"


def not_regular(path: Path, mode: int) -> MacprofError:
    what = describe(mode)
    if os.path.islink(path):  # name the target: "model.gguf" alone would hide that it is /dev/zero
        what = f"a symlink to {os.path.realpath(path)}, {what}"
    return MacprofError(f"{path}: not a regular file ({what})")


def not_a_folder(path: Path) -> str | None:
    """Why ``path``'s folder cannot be made, when a file stands where one of its folders would
    be ("runs is a regular file, not a folder"; mkdir says only "File exists"), else None."""
    for parent in reversed(Path(path).parents):  # from the root down: the first that is no folder
        try:
            mode = os.stat(parent).st_mode
        except OSError:
            return None  # missing from here on: nothing stands in the way
        if not stat.S_ISDIR(mode):
            return f"{parent} is {describe(mode)}, not a folder"
    return None


def linked(path: Path) -> str:
    """`` (a symlink to TARGET)`` for a symlink, else nothing: a message about what a file holds
    names what it really is (a snapshot's "model.gguf" linked to /etc/passwd), never quotes it."""
    return f" (a symlink to {os.path.realpath(path)})" if os.path.islink(path) else ""


def regular_stat(path: Path) -> os.stat_result:
    """os.stat of a regular file (symlinks followed), or a one-line error."""
    st = os.stat(path)
    if not stat.S_ISREG(st.st_mode):
        raise not_regular(Path(path), st.st_mode)
    return st


def open_regular(path: Path):
    """Open a regular file for reading, unbuffered; refuse anything else without blocking."""
    regular_stat(path)
    fd = os.open(path, _OPEN_FLAGS)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):  # replaced between the stat and the open
            raise not_regular(Path(path), st.st_mode)
        return os.fdopen(fd, "rb", buffering=0)
    except BaseException:
        os.close(fd)
        raise


def read_regular(path: Path, limit: int, what: str) -> bytes:
    """The whole of a file read on a user's word, refused in one line (a MacprofError naming the
    file) where it is not a regular file (a FIFO, a device, a socket, a directory: by its mode,
    before anything blocks), holds more than ``limit`` bytes, or reads otherwise than its reported
    size (a kernel pseudo-file: /proc/self/environ reports 0 bytes and reads the environment).
    At most ``limit`` + 1 bytes are read: a reported size is trusted only to refuse early, never
    to read less. OSError (missing, permission) is the caller's to phrase."""
    with open_regular(path) as fh:
        size = os.fstat(fh.fileno()).st_size
        if size > limit:
            raise MacprofError(f"{path}: {size} bytes is too large for {what} (at most {limit})")
        parts: list[bytes] = []
        got = 0
        while got <= limit:  # a read may return less than asked (a pipe-like file): read to EOF or the cap
            chunk = fh.read(min(limit + 1 - got, 1 << 20))
            if not chunk:
                break
            parts.append(chunk)
            got += len(chunk)
    data = b"".join(parts)
    if len(data) > limit:
        raise MacprofError(f"{path}: more than {limit} bytes: too large for {what}")
    # a file appended to while read (a journal of a run going on) reads more than it reported: kept
    if (size == 0 and data) or len(data) < size:
        raise MacprofError(f"{path}: reports {size} bytes but reads {len(data)}: a kernel pseudo-file (/proc, /sys) "
                           f"or a file cut while read, not {what}")
    return data


def read_text(path: Path, limit: int, what: str) -> str:
    """``read_regular``'s bytes as UTF-8 text; one line where they are not."""
    data = read_regular(path, limit, what)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise MacprofError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start}): not {what}") from None


def model_files(path: Path) -> list[Path]:
    """The files of a model: the GGUF file itself, or an MLX directory's entries, each of
    which must be a regular file (subdirectories are not part of the model and are left out)."""
    path = Path(path)
    st = os.stat(path)
    if stat.S_ISREG(st.st_mode):
        return [path]
    if not stat.S_ISDIR(st.st_mode):
        raise not_regular(path, st.st_mode)
    files = []
    for entry in sorted(path.iterdir()):
        try:
            mode = os.stat(entry).st_mode
        except FileNotFoundError:
            raise MacprofError(f"{entry}: a dangling symlink (its target does not exist)") from None
        if stat.S_ISDIR(mode):
            continue
        if not stat.S_ISREG(mode):
            raise not_regular(entry, mode)
        files.append(entry)
    return files
