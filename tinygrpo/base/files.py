"""Writing a run's files: a failed write is one OSError (WriteError) naming the file and the errno, whatever the
writer, and leaves no temporary file behind.

The writers a run uses do not all raise OSError: safetensors raises SafetensorError("... (os error 28)") without the
file, and torch.save's C++ writer turns any failed write into RuntimeError("[enforce fail at inline_container.cc]
... unexpected pos"), the errno lost. `writing()` turns what each raises into a WriteError (an OSError, so every
`except OSError` still catches it); `named_save_errors()` recovers torch's errno and safetensors' file. The entry
points print a WriteError as one line (`describe_write_error`) with what was kept.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, NamedTuple

from tinygrpo.base.options import ConfigError

# safetensors' words for an I/O error: "(os error 28)" (0.4+), "Os { code: 28, ... }" (older)
_OS_ERROR = re.compile(r"os error (\d+)|code: (\d+)")
STAGING = ".tmp-save"  # save_model_files' temporary directory, inside the model directory


class WriteError(OSError):
    """A file could not be written: errno, its meaning (strerror) and the file (filename)."""


def as_write_error(exc: BaseException, path: str | Path, *, own_name: bool = True) -> WriteError | None:
    """The WriteError that `exc` stands for, or None when it is not a failed write. It names the file `exc` names
    (own_name) or else `path`: a temporary file's writer passes its target and own_name=False, so that the user
    reads the name of the file they know."""
    if isinstance(exc, WriteError):
        return exc
    code = None
    if isinstance(exc, OSError):
        code = exc.errno
    elif type(exc).__name__ == "SafetensorError" and (m := _OS_ERROR.search(str(exc))):
        code = int(m.group(1) or m.group(2))
    if not code:
        return None
    named = getattr(exc, "filename", None) if own_name else None
    return WriteError(code, os.strerror(code), str(named or path))


def _remove(paths: Iterable[Path], dirs: Iterable[Path]) -> None:
    for p in paths:
        with contextlib.suppress(OSError):  # (what a full disk or a read-only file system left, if anything)
            Path(p).unlink(missing_ok=True)
    for d in dirs:
        shutil.rmtree(d, ignore_errors=True)


@contextlib.contextmanager
def writing(
    path: str | Path,
    *,
    temp_files: Iterable[Path] = (),
    temp_dirs: Iterable[Path] = (),
    own_name: bool = True,
) -> Iterator[None]:
    """Around a write of `path`: a failure of any writer is raised as a WriteError (see as_write_error), and the
    temporary files and directories given are removed on any failure (an interrupt too). Other errors pass."""
    try:
        yield
    except BaseException as e:
        _remove(temp_files, temp_dirs)
        err = as_write_error(e, path, own_name=own_name) if isinstance(e, Exception) else None
        if err is None or err is e:
            raise
        raise err from e


def write_atomic(path: str | Path, data: str | bytes) -> None:
    """`data` into `path` under a temporary name, renamed into place when complete: a reader never sees half a file,
    and a failure leaves neither half a file nor the temporary one."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    with writing(path, temp_files=[tmp], own_name=False):
        if isinstance(data, bytes):
            tmp.write_bytes(data)
        else:
            tmp.write_text(data)
        os.replace(tmp, path)


def append_whole(path: str | Path, data: bytes) -> None:
    """Append `data` to `path` whole or not at all: a write cut short (a full disk, a file-size limit) is cut back,
    so the file never ends in a torn line of a failed write (a kill mid-write can still tear one: the readers drop
    it)."""
    with writing(path):
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666)
        try:
            start = os.fstat(fd).st_size
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view) :]
            except OSError:
                with contextlib.suppress(OSError):
                    os.ftruncate(fd, start)
                raise
        finally:
            os.close(fd)


def save_model_files(dest: str | Path, parts: Iterable[Any], texts: dict[str, str] | None = None) -> None:
    """`save_pretrained` of each part (a model, a tokenizer), then `texts` ({file name: content}), into `dest`,
    all or nothing: written into a temporary directory inside `dest` (the same file system), then moved into it file
    by file, config.json last (the file that makes a directory a model, to transformers and to train_sft's overwrite
    check). A failure removes the temporary directory and names the file in `dest` that failed."""
    dest = Path(dest)
    tmp = dest / STAGING
    dest.mkdir(parents=True, exist_ok=True)
    shutil.rmtree(tmp, ignore_errors=True)  # (what a killed save left)
    try:
        with writing(tmp, temp_dirs=[tmp]), named_save_errors():
            for part in parts:
                part.save_pretrained(tmp)
            for name, text in (texts or {}).items():
                (tmp / name).write_text(text)
            staged = sorted(tmp.iterdir(), key=lambda p: p.name == "config.json")
            for p in staged:
                os.replace(p, dest / p.name)
            tmp.rmdir()
    except WriteError as e:
        name = str(e.filename).replace(str(tmp), str(dest), 1)  # the file the user will look for
        raise WriteError(e.errno, e.strerror, name) from e


class _Named:
    """A file opened for writing by a library, whose failed writes name it: a write that fails raises an OSError
    with the errno alone (the open named the file, the write does not)."""

    def __init__(self, raw, path) -> None:
        self._raw, self._path = raw, os.fsdecode(path)

    def _named(self, call, *args):
        try:
            return call(*args)
        except OSError as e:
            if e.filename or not e.errno:
                raise
            raise WriteError(e.errno, os.strerror(e.errno), self._path) from e

    def write(self, data):
        return self._named(self._raw.write, data)

    def writelines(self, lines) -> None:
        self._named(self._raw.writelines, lines)

    def flush(self) -> None:
        self._named(self._raw.flush)

    def close(self) -> None:
        self._named(self._raw.close)

    def __getattr__(self, name: str):
        return getattr(self._raw, name)

    def __enter__(self) -> _Named:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class _KeepsError:
    """The file torch.save writes through: the OSError of a failed write is kept (torch's C++ writer replaces it
    by a RuntimeError without the errno)."""

    def __init__(self, raw) -> None:
        self.raw = raw
        self.error: OSError | None = None

    def write(self, data) -> int:
        try:
            return self.raw.write(data)
        except OSError as e:
            self.error = e
            raise

    def flush(self) -> None:
        self.raw.flush()


@contextlib.contextmanager
def named_save_errors() -> Iterator[None]:
    """For the duration, a failed write by torch.save, safetensors or Python's open is a WriteError naming its file,
    for the savers a library calls itself (accelerate's save_state, transformers' save_pretrained).

    torch's C++ writer reports any failed write as "RuntimeError: [enforce fail at inline_container.cc] unexpected
    pos" and drops the errno: such a save is written again through a Python file, whose OSError is kept. A save
    that works the first time is untouched (written through Python, torch would name the archive's root "archive",
    not after the file: other bytes, the same contents). safetensors keeps the errno in its message ("os error 28")
    but not the file: serialize_file, which its save_file and save_model call, is wrapped to add it. A file opened
    for writing with Python's open is wrapped (_Named) so that its failed writes name it. (A copy by os.sendfile, as
    shutil makes, still fails without the name: the caller's directory is named.)"""
    import builtins
    import io

    import safetensors.torch
    import torch

    real_save, real_serialize, real_open = torch.save, safetensors.torch.serialize_file, builtins.open

    def save(obj, f, *args, **kwargs):
        if not isinstance(f, str | os.PathLike):
            return real_save(obj, f, *args, **kwargs)
        try:
            return real_save(obj, f, *args, **kwargs)
        except RuntimeError:
            pass  # the errno is lost: the same write again, through Python
        with writing(f), open(f, "wb") as raw:
            sink = _KeepsError(raw)
            try:
                real_save(obj, sink, *args, **kwargs)
            except RuntimeError:
                if sink.error is None:
                    raise  # not a failed write
                raise sink.error from None
        return None  # (the second try succeeded: a passing fault, and the file is whole)

    def serialize_file(tensors, filename, *args, **kwargs):
        with writing(filename):
            return real_serialize(tensors, filename, *args, **kwargs)

    def open_(file, mode="r", *args, **kwargs):
        f = real_open(file, mode, *args, **kwargs)
        named = isinstance(file, str | bytes | os.PathLike) and set(mode) & set("wax+")
        return _Named(f, file) if named else f

    torch.save, safetensors.torch.serialize_file = save, serialize_file
    builtins.open = io.open = open_  # (pathlib opens through io.open)
    try:
        yield
    finally:
        torch.save, safetensors.torch.serialize_file = real_save, real_serialize
        builtins.open = io.open = real_open


def describe_write_error(exc: OSError, kept: str) -> str:
    """The one line (without "error: ") for a write that failed: the file, what its errno means, and `kept`: what
    is still there (the last complete checkpoint, or that there is none)."""
    meaning = os.strerror(exc.errno) if exc.errno else (exc.strerror or str(exc) or type(exc).__name__)
    verb = "cannot write " if isinstance(exc, WriteError) else ""
    where = f"{verb}{exc.filename}: " if exc.filename else verb
    return f"{where}{meaning}; {kept}"


LOCK_FILE = ".lock"


class Input(NamedTuple):
    """A file or directory a run reads: its field, its value as given, the path read, and whether the input owns
    its directory (a model, a dataset) or is one file in a directory that holds others (a recipe.yaml beside runs/,
    the README's `--reward_funcs my_rewards.py:brevity` in the working directory)."""

    field: str
    value: str
    path: Path
    owns_dir: bool


def check_apart(out: str | Path, inputs: list[Input]) -> None:
    """A run never writes where it reads. Refused, by real paths (symlinks, relative paths, trailing slashes
    resolved): output_dir equal to an input's directory, or inside a directory the input owns (a model, a dataset),
    and any input inside output_dir. The last also covers `--model_name_or_path runs/x/final --output_dir runs/x`:
    output_dir is the run's to replace (final/ at the end, checkpoints pruned, and all of it cleared by
    --overwrite_output_dir before the model is even loaded), so an input there could be deleted under the run."""
    # (realpath, not resolve(): a symlink loop is left as it is, for check_writable to report, not an error here)
    o = Path(os.path.realpath(out))
    for field, value, path, owns_dir in inputs:
        p = Path(os.path.realpath(path))
        where = p if owns_dir else p.parent
        if o == where:
            problem = f"output_dir {out} is {'' if owns_dir else 'the directory of '}{field} {value}"
        elif owns_dir and where in o.parents:
            problem = f"output_dir {out} is inside {field} {value}"
        elif o in p.parents:
            problem = f"{field} {value} is inside output_dir {out}"
        else:
            continue
        if str(o) != str(out) or str(p) != value:  # (say why two different spellings are the same place)
            problem += f" (both are {o})" if o == where else f" (real paths: {o} and {p})"
        raise ConfigError(f"{problem}: a run never writes where it reads; choose another --output_dir")


def check_writable(out: Path) -> None:
    """Create the output directory if needed and write a file in it, so that a read-only or missing place fails
    now, not after the models are loaded."""
    if out.exists() and not out.is_dir():
        raise ConfigError(f"output_dir {out} exists and is not a directory")
    probe = out / ".write-test"
    try:
        out.mkdir(parents=True, exist_ok=True)
        probe.write_text("")
        probe.unlink()
    except OSError as e:
        with contextlib.suppress(OSError):  # (a probe created, then not written)
            probe.unlink(missing_ok=True)
        raise ConfigError(f"output_dir {out} is not writable: {e.strerror or e}") from None


def lock_output_dir(out: Path) -> int:
    """Hold output_dir for this run (an exclusive lock on its .lock file, released when the process ends, even by
    SIGKILL); a second run into the same directory is refused, naming the holder's pid. Returns the lock's fd,
    which must stay open for the run."""
    import fcntl

    with writing(out / LOCK_FILE):
        fd = os.open(out / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        holder = os.read(fd, 64).decode(errors="replace").strip() or "unknown"
        os.close(fd)
        raise ConfigError(
            f"output_dir {out} is in use by another run (pid {holder}); wait for it to finish or choose another "
            f"--output_dir"
        ) from None
    try:
        with writing(out / LOCK_FILE):
            os.ftruncate(fd, 0)
            os.write(fd, f"{os.getpid()}\n".encode())
    except OSError:
        os.close(fd)
        raise
    return fd
