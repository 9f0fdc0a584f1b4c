"""Files a user names, handled so that none of them can hurt: shown, read and written safely.

A classroom tool reads files that students named and writes where an instructor points it, so
every path is treated as untrusted:

- ``shown(path)``: a name for the terminal, with control characters escaped (``\\x1b``), so a
  file called ``ESC[31m…`` cannot recolour the terminal or rewrite its title, and a name that
  is not valid UTF-8 prints instead of crashing the program.
- ``read_regular(path, max_bytes)``: the bytes of a regular file of bounded size. A FIFO, a
  device or a folder is refused before a byte is read (reading a FIFO waits forever for a
  writer; ``/dev/zero`` never ends), and so is a file over ``max_bytes``.
- ``create_new(path, data)``: a file that did not exist, created exclusively (``O_EXCL``): two
  processes can never both get the same name, and an existing file or link is never opened.
- ``replace_atomically(path, data)``: a complete new file in place of ``path`` in one step (a
  temporary file in the same folder, flushed to disk, then ``os.replace``), so a failed write
  leaves the old file whole and never a truncated one; a link at ``path`` is replaced itself,
  never written through.
"""

import os
import stat
import uuid

_KINDS = ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a device"),
          (stat.S_ISBLK, "a device"), (stat.S_ISSOCK, "a socket"), (stat.S_ISLNK, "a symbolic link"))


class NotReadable(ValueError):
    """Why a file was not read: not a regular file, too large, or an error from the system."""


def shown(path):
    """``path`` (a str, bytes or Path) as text a terminal shows as it is: every character that is
    not printable (escape, bell, newline, a right-to-left override, half of a name that was not
    UTF-8) is written as its Python escape, ``\\x1b``, ``\\u202e``, ``\\udce9``."""
    text = os.fsdecode(path) if isinstance(path, (bytes, os.PathLike)) else str(path)
    return "".join(ch if ch.isprintable() else _escape(ch) for ch in text)


def _escape(ch):
    code = ord(ch)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def kind(mode):
    """What a file of this ``st_mode`` is, in words ("a FIFO", "a folder", …; "a regular file")."""
    return next((name for test, name in _KINDS if test(mode)), "a regular file")


def read_regular(path, max_bytes):
    """The bytes of ``path`` (links followed) when it is a regular file of at most ``max_bytes``;
    raises ``NotReadable`` saying why not. The file is looked at before it is opened and again
    once open (``O_NONBLOCK``, so opening a FIFO cannot wait), and never more than
    ``max_bytes + 1`` bytes are read, even from a file that grows meanwhile."""
    try:
        before = os.stat(path)
        if not stat.S_ISREG(before.st_mode):
            raise NotReadable(f"not a regular file ({kind(before.st_mode)})")
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0))
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):                   # swapped for a FIFO since the look
                raise NotReadable(f"not a regular file ({kind(st.st_mode)})")
            chunks, total = [], 0
            while total <= max_bytes:
                chunk = os.read(fd, min(1 << 20, max_bytes + 1 - total))
                if not chunk:
                    break
                chunks.append(chunk)
                total += len(chunk)
        finally:
            os.close(fd)
    except OSError as err:
        raise NotReadable(f"cannot be read ({type(err).__name__}: {err.strerror})") from err
    if total > max_bytes or st.st_size > max_bytes:
        raise NotReadable(f"too large (over {max_bytes / 1e6:g} MB)")
    return b"".join(chunks)


def _sync_folder(folder):
    """Flush a folder's entries to disk (POSIX; elsewhere the rename is already durable enough)."""
    if os.name != "posix":
        return
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _write_all(fd, data):
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]
    os.fsync(fd)


def create_new(path, data):
    """Write ``data`` into a new file ``path``: raises ``FileExistsError`` if anything (a file, a
    link, even a link to nothing) is there already. A failed write removes the partial file."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_BINARY", 0)
    fd = os.open(path, flags, 0o666)
    try:
        _write_all(fd, data)
    except BaseException:
        os.close(fd)
        os.unlink(path)
        raise
    os.close(fd)
    _sync_folder(os.path.dirname(os.path.abspath(path)))


def replace_atomically(path, data):
    """Put a file holding ``data`` at ``path`` in one step: written in full to a temporary file
    beside it, flushed, then renamed over ``path``. Whatever fails, ``path`` is either the old
    file or the new one, never a part of either; the temporary file is removed."""
    folder, name = os.path.split(os.path.abspath(path))
    tmp = os.path.join(folder, f".{name}.{os.getpid()}-{uuid.uuid4().hex[:8]}.tmp")
    try:
        create_new(tmp, data)
        os.replace(tmp, path)
    except BaseException:
        if os.path.lexists(tmp):
            os.unlink(tmp)
        raise
    _sync_folder(folder)
