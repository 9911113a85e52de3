"""Data builds that are whole or absent (tinygrpo/data/problems.py, tinygrpo/data/task.py, data/build.py), by fault class:
a build killed (SIGKILL) at every moment it touches the file system, a write that fails (ENOSPC, EROFS) at each of its sites, a split cut after the
build at a line boundary or mid-line, or changed; a byte-order mark; a family's build that never finished; a task
refused before its problems are written; and --out that is not a directory."""

from __future__ import annotations

import errno
import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

import train_sft
from tinygrpo.data import problems, task
from tinygrpo.data.problems import MANIFEST, build_mismatch, load_problems, load_split
from tinygrpo.data.task import Task, get_task, register_task_family

REPO = Path(__file__).resolve().parent.parent
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}


def build(out: Path, name: str = "countdown") -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "data/build.py", "--task", name, "--out", str(out)],
        cwd=REPO,
        env=ENV,
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.fixture(scope="module")
def countdown_rows() -> dict[str, list[dict]]:
    return get_task("countdown").build()


@pytest.fixture(scope="module")
def countdown_splits(countdown_rows) -> dict[str, bytes]:
    """The bytes each split of a complete build holds."""
    return {split: problems.jsonl_bytes(r) for split, r in countdown_rows.items()}


def assert_whole_or_unfinished(directory: Path, splits: dict[str, bytes]) -> str:
    """After anything: no temporary file; every split there is a complete one; the manifest, if written, verifies
    (a finished build) and without it the build reads as unfinished. Returns which."""
    names = {p.name for p in directory.iterdir()} if directory.is_dir() else set()
    assert not {n for n in names if n.endswith(".tmp")}, names
    for name in names - {MANIFEST}:
        assert (directory / name).read_bytes() == splits[name.removesuffix(".jsonl")], name
    if MANIFEST in names:
        assert build_mismatch(directory) is None
        assert names == {MANIFEST, *(f"{s}.jsonl" for s in splits)}
        return "finished"
    return "unfinished"


# ================================================================================================ kill


# The calls of a build that touch the file system (as sys.setprofile names them): a SIGKILL before or after each of
# them is every moment a kill can land that differs in what is on disk.
FILE_CALLS = {"mkdir", "open", "write", "close", "rename", "replace", "link", "unlink", "rmdir", "rmtree"}


def listed(directory: Path) -> set[str]:
    return {p.name for p in directory.iterdir()} if directory.exists() else set()


def named(splits: dict[str, bytes]) -> dict[str, bytes]:
    return {f"{split}.jsonl": data for split, data in splits.items()}


def build_killed_at(moment: int, directory: Path, splits: dict[str, list[dict]]) -> tuple[bool, int]:
    """write_problem_set in a forked child that SIGKILLs itself at its `moment`-th file-system call or return (a
    real SIGKILL: no handler, no finally, no buffer flushed). True when it was killed, False when the build ended
    before that moment; and the child's pid (its staging directories are named after it)."""
    pid = os.fork()
    if pid == 0:  # the child
        try:
            seen = 0

            def profile(frame, event, arg) -> None:
                nonlocal seen
                name = getattr(arg, "__name__", "") if event.startswith("c_") else frame.f_code.co_name
                if event in ("c_call", "c_return", "call") and name in FILE_CALLS:
                    if seen == moment:
                        os.kill(os.getpid(), signal.SIGKILL)
                    seen += 1

            sys.setprofile(profile)
            problems.write_problem_set(directory, "countdown", splits)
            sys.setprofile(None)
        finally:
            os._exit(0)
    status = os.waitpid(pid, 0)[1]
    return os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL, pid


@pytest.mark.slow
@pytest.mark.kills
@pytest.mark.parametrize("before", ["nothing", "an_older_build"])
def test_a_build_killed_at_any_moment_leaves_the_old_build_or_the_new_and_the_next_build_sweeps(
    tmp_path, countdown_rows, before
):
    """What SIGKILL allows a build to leave, at every moment it can land: the task's directory is absent (nothing
    was there), the old build untouched, or the new build whole; besides it at most the hidden staging names,
    which no reader opens. The next build removes them and is whole. A user's own file in the old directory
    survives every kill."""
    new_rows = {
        split: rows[:50] for split, rows in countdown_rows.items()
    }  # (the moments are the same as whole)
    old_rows = {split: rows[:49] for split, rows in countdown_rows.items()}  # (another build: a row short)
    builds = {
        name: named({s: problems.jsonl_bytes(r) for s, r in rows.items()})
        for name, rows in [("new", new_rows), ("old", old_rows)]
    }

    def which(directory: Path) -> str:
        """'new' or 'old': which whole build `directory` holds (fails on anything else); 'absent'."""
        if not directory.exists():
            return "absent"
        assert build_mismatch(directory) is None and (directory / MANIFEST).is_file()
        files = {p.name: p.read_bytes() for p in directory.iterdir() if p.name not in (MANIFEST, "notes.txt")}
        found = [name for name, b in builds.items() if files == b]
        assert found, f"neither build: {sorted(files)}"
        if before == "an_older_build":
            assert (directory / "notes.txt").read_text() == "mine"
        return found[0]

    outcomes = []
    for moment in range(10_000):
        out = tmp_path / str(moment)
        directory = out / "countdown"
        if before == "an_older_build":
            problems.write_problem_set(directory, "countdown", old_rows)
            (directory / "notes.txt").write_text("mine")
        killed, pid = build_killed_at(moment, directory, new_rows)
        if not killed:
            break
        staging = {p.name for p in problems.staging_dirs(directory, pid)}
        assert listed(out) <= {"countdown", *staging}, listed(out)
        outcomes.append(which(directory))
        problems.sweep_build_leftovers(directory)
        # the sweep undoes a swap cut between its renames, and touches a whole build not at all
        swept = which(directory)
        assert swept == outcomes[-1] or (outcomes[-1], swept) == ("absent", "old"), (
            moment,
            outcomes[-1],
            swept,
        )
        problems.write_problem_set(directory, "countdown", new_rows)
        assert listed(out) == {"countdown"} and which(directory) == "new"
        shutil.rmtree(out)
    # the kills landed at every stage: before anything was published, and after
    first = "absent" if before == "nothing" else "old"
    assert outcomes.count(first) > 10 and "new" in outcomes, outcomes
    assert set(outcomes) <= {first, "new", "absent"}, outcomes
    print(f"{moment} moments: {', '.join(f'{k} {outcomes.count(k)}' for k in sorted(set(outcomes)))}")


# ================================================================================================ failed writes


@pytest.mark.slow
@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EROFS])
@pytest.mark.parametrize("site", ["validation.jsonl", "train.jsonl", MANIFEST])
def test_a_failed_write_is_one_line_and_leaves_no_half_file(
    tmp_path, monkeypatch, capsys, countdown_splits, code, site
):
    import importlib.util

    spec = importlib.util.spec_from_file_location("build_script", REPO / "data" / "build.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    real_replace = os.replace

    def failing_replace(src, dst, *a, **kw):  # the rename that publishes a file (writes.write_atomic)
        if Path(dst).name == site:
            raise OSError(code, os.strerror(code), str(dst))
        return real_replace(src, dst, *a, **kw)

    monkeypatch.setattr(os, "replace", failing_replace)
    assert script.main(["--task", "countdown", "--out", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1 and site in err and os.strerror(code) in err, (
        err
    )
    assert assert_whole_or_unfinished(tmp_path / "countdown", countdown_splits) == "unfinished"


# ================================================================================================ after the build


@pytest.fixture
def built(tmp_path) -> Path:
    assert build(tmp_path, "reverse").returncode == 0
    return tmp_path / "reverse"


@pytest.mark.slow
@pytest.mark.parametrize(
    "cut",
    ["line_boundary", "mid_line", "a_row_changed", "a_row_added", "removed"],
)
def test_a_split_changed_after_its_build_is_refused_naming_it(built, cut):
    path = built / "train.jsonl"
    lines = path.read_bytes().splitlines(keepends=True)
    if cut == "line_boundary":
        path.write_bytes(b"".join(lines[: len(lines) * 3 // 10]))
    elif cut == "mid_line":
        path.write_bytes(b"".join(lines[:100]) + lines[100][:7])
    elif cut == "a_row_changed":
        row = json.loads(lines[5])
        row["answer"] = row["answer"] + "x"
        path.write_bytes(b"".join([*lines[:5], (json.dumps(row) + "\n").encode(), *lines[6:]]))
    elif cut == "a_row_added":
        path.write_bytes(b"".join([*lines, lines[0]]))
    else:
        path.unlink()
    with pytest.raises(ValueError) as e:
        load_problems(str(built))
    message = str(e.value)
    assert "train.jsonl" in message and "python data/build.py --task reverse" in message, message
    assert "\n" not in message


@pytest.mark.slow
def test_an_entry_point_refuses_a_cut_split_with_one_line(built, tmp_path):
    path = built / "train.jsonl"
    lines = path.read_bytes().splitlines(keepends=True)
    path.write_bytes(b"".join(lines[:300]))
    r = subprocess.run(
        [sys.executable, "train_sft.py", "--dataset_name", str(built), "--output_dir", str(tmp_path / "ref"),
         "--max_steps", "1", "--dataset_test_split", ""],
        cwd=REPO, env=ENV, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert r.returncode == 1 and r.stderr.startswith("error: ") and r.stderr.count("\n") == 1, r.stderr
    assert "300 lines" in r.stderr and not (tmp_path / "ref").exists()


@pytest.mark.slow
def test_a_build_is_whole_and_deleting_its_manifest_uses_the_files_as_they_are(built):
    assert build_mismatch(built) is None
    manifest = json.loads((built / MANIFEST).read_text())
    assert manifest["task"] == "reverse"
    assert {s: v["rows"] for s, v in manifest["splits"].items()} == {
        s: len(load_split(str(built), s)) for s in ("train", "validation", "test")
    }
    path = built / "train.jsonl"
    path.write_bytes(b"".join(path.read_bytes().splitlines(keepends=True)[:50]))
    (built / MANIFEST).unlink()
    assert len(load_split(str(built), "train")) == 50  # the user's own now


def test_the_committed_data_match_their_manifests():
    for directory in sorted(p.parent for p in problems.DATA_DIR.glob(f"*/{MANIFEST}")):
        assert build_mismatch(directory) is None, directory
    assert len(list(problems.DATA_DIR.glob(f"*/{MANIFEST}"))) >= 6


# ================================================================================================ encodings


def test_a_split_that_starts_with_a_byte_order_mark_is_read(tmp_path):
    rows = [{"prompt": "1+2=", "answer": "3"}, {"prompt": "4+5=", "answer": "9"}]
    (tmp_path / "train.jsonl").write_bytes(b"\xef\xbb\xbf" + problems.jsonl_bytes(rows))
    assert load_split(str(tmp_path), "train").to_list() == rows


# ================================================================================================ a family's build


@pytest.fixture
def toy_family(tmp_path, monkeypatch):
    """A task family writing under a temporary data/: `toy:<n>` has n-character prompts (`toy:huge` is a model too
    large for any machine)."""
    monkeypatch.setattr(problems, "DATA_DIR", tmp_path / "data")
    monkeypatch.setattr(task, "DATA_DIR", tmp_path / "data")
    calls = []

    def make(name: str) -> Task:
        def rows() -> dict[str, list[dict]]:
            calls.append(name)
            mk = [{"prompt": f"{i:03d}=", "answer": str(i % 7)} for i in range(300)]
            return {"validation": mk[:50], "test": mk[50:100], "train": mk[100:]}

        positions = 10**7 if name == "huge" else 16
        return Task(
            name=f"toy:{name}",
            summary="toy",
            build=rows,
            chars="0123456789=",
            config="configs/default.yaml",
            dataset=f"toy_{name}",
            reference={"output_dir": str(tmp_path / f"ref_{name}"), "n_positions": positions, "max_steps": 2,
                       "train_size": 0, "eval_split": "", "kernels": "native"},
        )  # fmt: skip

    register_task_family("toy", make)
    yield calls
    task.TASK_FAMILIES.pop("toy", None)
    for name in [n for n in task.TASKS if n.startswith("toy:")]:
        task.TASKS.pop(name)


def test_a_family_build_that_never_finished_is_written_again_and_said(toy_family, capsys):
    t = get_task("toy:a")
    t.ensure_data()
    assert toy_family == ["a"] and (t.data_dir / MANIFEST).is_file()
    t.ensure_data()  # finished: nothing to do
    assert toy_family == ["a"]
    (t.data_dir / MANIFEST).unlink()  # as a build killed before its last write leaves it
    (t.data_dir / "train.jsonl").write_text('{"prompt": "1=", "answer": "1"}\n')
    t.ensure_data()
    assert toy_family == ["a", "a"] and "unfinished build" in capsys.readouterr().out
    assert build_mismatch(t.data_dir) is None and len(load_split(str(t.data_dir), "train")) == 200


def test_a_task_whose_reference_is_refused_writes_no_data(toy_family, tmp_path, capsys):
    assert train_sft.main(["--task", "toy:huge"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "n_positions=10000000" in err and err.count("\n") == 1, err
    assert not (tmp_path / "data" / "toy_huge").exists()  # refused before its problems were written
    assert train_sft.main(["--task", "toy:b"]) == 0  # a size the machine can hold: written, then trained
    assert build_mismatch(tmp_path / "data" / "toy_b") is None
    capsys.readouterr()
    # A family registered by this process's code is not seen by the fresh process the portable kernels train in.
    assert train_sft.main(["--task", "toy:b", "--kernels", "portable", "--overwrite_output_dir", "true"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "--kernels native" in err and err.count("\n") == 1, err


# ================================================================================================ build.py's arguments


@pytest.mark.slow
def test_build_out_that_is_not_a_directory_is_one_line(tmp_path):
    (tmp_path / "file").write_text("mine\n")
    for out in (tmp_path / "file", tmp_path / "file" / "below"):
        r = build(out, "seed_bank")
        assert r.returncode == 1 and r.stderr.startswith("error: --out ") and r.stderr.count("\n") == 1, (
            r.stderr
        )
        assert "not a directory" in r.stderr
    assert (tmp_path / "file").read_text() == "mine\n"


# ================================================================================================ a user's task file

# A user's task file whose task would write over a built-in set, or whose build() raises: one line, nothing written.
HOSTILE_TASKS = {
    "a_built_in_name": (
        'register_task(Task(name="reverse", summary="x", build=build, chars="ab=", correct="exact_match"))',
        "task name 'reverse' is already registered by tinygrpo.data.tasks.reverse",
    ),
    "a_built_in_dataset": (
        'register_task(Task(name="mine", summary="x", build=build, chars="ab=", correct="exact_match", '
        'dataset="countdown"))',
        "the built-in task 'countdown''s",
    ),
    "a_build_that_raises": (
        'register_task(Task(name="mine_raises", summary="x", build=lambda: 1 / 0, chars="ab=", '
        'correct="exact_match", reference={"output_dir": "unused", "max_steps": 1}))',
        "its build() failed: ZeroDivisionError: division by zero",
    ),
}
TASK_FILE = """from tinygrpo.data.task import Task, register_task


def build():
    rows = [{"prompt": "ab=", "answer": "ba"}]
    return {"train": rows, "validation": rows, "test": rows}


"""


def committed(name: str) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in (problems.DATA_DIR / name).iterdir()}


def build_script():
    import importlib.util

    spec = importlib.util.spec_from_file_location("build_script", REPO / "data" / "build.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    return script


@pytest.mark.slow
@pytest.mark.parametrize("case", sorted(HOSTILE_TASKS))
@pytest.mark.parametrize("entry", ["data/build.py", "train_sft.py", "train_grpo.py"])
def test_a_task_file_that_would_overwrite_a_built_in_set_or_fails_to_build_is_one_line(
    tmp_path, monkeypatch, capfd, case, entry
):
    """Each entry point's main(), in process; the task registry is put back after (a refused task registers
    nothing that lasts)."""
    from tinygrpo.data import task as registry

    registry.discover_tasks()  # (the built-in tasks in the registry first: put back as they are after the test)
    monkeypatch.setattr(registry, "TASKS", dict(registry.TASKS))
    registration, why = HOSTILE_TASKS[case]
    path = tmp_path / f"{case}.py"
    path.write_text(TASK_FILE + registration + "\n")
    before = {name: committed(name) for name in ("reverse", "countdown")}
    argv = ["--task", str(path)]
    argv += {
        "train_sft.py": ["--output_dir", str(tmp_path / "ref")],
        "train_grpo.py": ["--output_dir", str(tmp_path / "run")],
    }.get(entry, [])
    main = {"data/build.py": lambda a: build_script().main(a), "train_sft.py": train_sft.main}.get(entry)
    capfd.readouterr()
    rc = (main or __import__("train_grpo").main)(argv)
    err = capfd.readouterr().err
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert rc == 1 and len(errors) == 1 and why in errors[0], err[-2000:]
    assert "Traceback" not in err
    assert {name: committed(name) for name in before} == before  # nothing of the built-in sets changed
    assert not (problems.DATA_DIR / "mine").exists() and not (problems.DATA_DIR / "mine_raises").exists()


@pytest.mark.slow
def test_a_build_from_another_checkout_writes_into_that_checkout(tmp_path):
    """data/build.py builds with its own checkout's tinygrpo, under its own data/ (not the installed copy's), and
    says where on its first line."""
    other = tmp_path / "checkout"
    shutil.copytree(REPO / "tinygrpo", other / "tinygrpo", ignore=shutil.ignore_patterns("__pycache__"))
    (other / "data").mkdir()
    shutil.copy(REPO / "data" / "build.py", other / "data" / "build.py")
    before = committed("reverse")
    env = {k: v for k, v in ENV.items() if k != "TINYGRPO_DATA_DIR"}
    r = subprocess.run(
        [sys.executable, str(other / "data" / "build.py"), "--task", "reverse"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines()[0] == f"building under {other / 'data'}"
    assert (
        build_mismatch(other / "data" / "reverse") is None
        and (other / "data" / "reverse" / MANIFEST).is_file()
    )
    assert committed("reverse") == before


def test_a_build_interrupted_after_its_first_split_is_rebuilt_not_refused(tmp_path, monkeypatch):
    """What an earlier version's killed build left (a split, no manifest) is a family's unfinished build: the next
    use writes it again, whole, and it loads; a built-in set's directory in that state is the user's, loaded as
    it is (never refused for a manifest it does not have)."""
    from tinygrpo.data import task as task_module

    monkeypatch.setattr(task_module, "DATA_DIR", tmp_path)
    rows = {s: [{"prompt": f"{s}{i}=", "answer": str(i)} for i in range(3)] for s in ("train", "test")}
    t = Task(
        name="fam:x",
        summary="x",
        build=lambda: rows,
        chars="traintes0123=",
        correct="exact_match",
        dataset="fam_x",
    )
    (tmp_path / "fam_x").mkdir()
    (tmp_path / "fam_x" / "train.jsonl").write_bytes(problems.jsonl_bytes(rows["train"][:1]))  # half a build
    said = []
    t.ensure_data(said.append)
    assert said and "an unfinished build" in said[0]
    assert build_mismatch(tmp_path / "fam_x") is None and (tmp_path / "fam_x" / MANIFEST).is_file()
    assert load_problems(str(tmp_path / "fam_x"))["train"].num_rows == 3
    (tmp_path / "fam_x" / MANIFEST).unlink()  # (now the user's own files: used as they are)
    assert load_problems(str(tmp_path / "fam_x"))["test"].num_rows == 3


def test_a_live_builds_staging_is_left_alone_and_a_dead_ones_swept(tmp_path):
    """Two processes building one set at once (a study's seeds side by side) each stage under their own pid: a
    build sweeps what dead processes left, never a live one's work in progress."""
    directory = tmp_path / "countdown"
    parent_alive = problems.staging_dirs(directory, os.getppid())[0]  # (pytest's parent: alive)
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    dead = problems.staging_dirs(directory, child.pid)
    for d in (parent_alive, *dead):
        d.mkdir(parents=True)
    problems.write_problem_set(directory, "countdown", {"train": [{"prompt": "1=", "answer": "1"}]})
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["countdown", parent_alive.name])


def _rows(n: int, tag: str) -> list[dict]:
    return [{"prompt": f"{tag}{i}=", "answer": str(i)} for i in range(n)]


def test_a_build_that_failed_in_this_process_can_be_retried_in_it(tmp_path, monkeypatch):
    """A write that fails partway (the second split here) leaves this process's own staging directory behind only
    until the failure is handled: a retry in the same process (a study's next seed, a notebook's next cell) builds
    the set, and nothing is left beside it."""
    directory = tmp_path / "set"
    real, calls = problems.write_jsonl, []

    def fail_second(rows, path):
        calls.append(path)
        if len(calls) == 2:
            raise OSError(errno.ENOSPC, "No space left on device", str(path))
        return real(rows, path)

    monkeypatch.setattr(problems, "write_jsonl", fail_second)
    with pytest.raises(OSError):
        problems.write_problem_set(directory, "toy", {"train": _rows(3, "a"), "test": _rows(2, "b")})
    monkeypatch.setattr(problems, "write_jsonl", real)
    problems.write_problem_set(directory, "toy", {"train": _rows(3, "a"), "test": _rows(2, "b")})
    assert load_split(str(directory), "test").num_rows == 2
    assert [p.name for p in tmp_path.iterdir()] == ["set"]


def test_a_rebuild_carries_a_users_files_but_neither_a_stray_tmp_nor_a_split_it_no_longer_writes(tmp_path):
    """Rebuilding a set into its directory keeps the user's own files there, but not a `.tmp` a killed write left
    (half a file) and not a split of the old build that the new one does not write: it would load as if current."""
    directory = tmp_path / "set"
    problems.write_problem_set(directory, "toy", {"train": _rows(3, "a"), "test": _rows(2, "b")})
    (directory / "notes.txt").write_text("mine")
    (directory / "train.jsonl.tmp").write_text('{"prompt": "half')
    problems.write_problem_set(directory, "toy", {"train": _rows(4, "c")})
    assert sorted(p.name for p in directory.iterdir()) == sorted([MANIFEST, "train.jsonl", "notes.txt"])
    assert load_split(str(directory), "train").num_rows == 4
    with pytest.raises(ValueError):
        load_split(str(directory), "test")
