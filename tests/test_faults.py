"""Every write of both entry points, failed with ENOSPC, EFBIG and EROFS (issue 30, class 2): exit code 1, one
`error:` line naming the file, what the errno means and the last complete checkpoint (or that there is none), no
traceback, no temporary file left, no torn log line, and the last complete checkpoint still verifies.

A fault is injected where the bytes go, on the paths of one site (a regex on the path under the test's directory):
Python's open in a writing mode, os.open / os.write (the logs' appends, the lock), os.replace (each rename that
publishes a file), safetensors' serialize_file (under save_file, save_model and transformers' save_pretrained,
raising SafetensorError "(os error N)" as safetensors does), and torch.save of a path, which fails as torch's C++
writer does (a RuntimeError from inline_container.cc, without the errno). EROFS fails the open or the rename; ENOSPC
and EFBIG fail a write after half of its bytes (a torn write). Real faults too: a file-size limit (ulimit -f) hit by
safetensors and by torch's own writer.
"""

from __future__ import annotations

import builtins
import errno
import io
import os
import re
import resource
import shutil
from pathlib import Path
from typing import NamedTuple

import pytest
import safetensors.torch
import torch
from _runs import cli
from safetensors import SafetensorError

import train_grpo
import train_sft
from tinygrpo.run import checkpoint as ckpt
from tinygrpo.run import report
from tinygrpo.run.logs import read_jsonl_lines
from tinygrpo.run.report import curves

ERRNOS = [errno.ENOSPC, errno.EFBIG, errno.EROFS]
TORCH_WRITE_FAILED = "[enforce fail at inline_container.cc:672] . unexpected pos 704 vs 598"
# What a failed save may never leave behind (checkpoint.py, writes.py, the report's and the logs' temporaries).
LEFTOVERS = re.compile(
    r"(^|/)(\.tmp-checkpoint-\d+|\.del-checkpoint-\d+|checkpoint-\d+\.old|\.tmp-save)$|\.tmp$"
)


class Fault:
    """ENOSPC / EFBIG / EROFS for every write of a path whose place under `root` fullmatches `pattern`, after the
    first `after` writes of it (counted by opens, renames and saves) have gone through."""

    def __init__(self, root: Path, pattern: str, code: int, after: int = 0) -> None:
        self.root, self.regex, self.code, self.after = root, re.compile(pattern), code, after
        self.seen = self.hits = 0
        self.fds: set[int] = set()

    def strikes(self, path) -> bool:
        try:
            rel = os.path.relpath(os.fsdecode(path), self.root)
        except (TypeError, ValueError):
            return False
        if not self.regex.fullmatch(rel):
            return False
        self.seen += 1
        return self.seen > self.after

    def error(self, *names) -> OSError:
        self.hits += 1
        return OSError(self.code, os.strerror(self.code), *(str(n) for n in names))


class _Torn:
    """A file whose writes store half their bytes, then fail with the fault's errno (as a real write does: no file
    name). No fileno(), so that shutil's copies write through it too."""

    def __init__(self, f, fault: Fault) -> None:
        self._f, self._fault = f, fault

    def write(self, data):
        self._f.write(data[: len(data) // 2])
        raise self._fault.error()

    def fileno(self) -> int:
        raise io.UnsupportedOperation("fileno")

    def __getattr__(self, name):
        return getattr(self._f, name)

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self._f.close()


def inject(monkeypatch, fault: Fault) -> None:
    real_open, real_os_open, real_write, real_close = builtins.open, os.open, os.write, os.close
    real_replace, real_serialize, real_torch_save = os.replace, safetensors.torch.serialize_file, torch.save

    def open_(file, mode="r", *args, **kwargs):
        if isinstance(file, str | bytes | os.PathLike) and set(mode) & set("wax+") and fault.strikes(file):
            if fault.code == errno.EROFS:
                raise fault.error(file)
            return _Torn(real_open(file, mode, *args, **kwargs), fault)
        return real_open(file, mode, *args, **kwargs)

    def os_open(path, flags, *args, **kwargs):
        if flags & (os.O_WRONLY | os.O_RDWR) and fault.strikes(path):
            if fault.code == errno.EROFS:
                raise fault.error(path)
            fd = real_os_open(path, flags, *args, **kwargs)
            fault.fds.add(fd)
            return fd
        return real_os_open(path, flags, *args, **kwargs)

    def os_write(fd, data):
        if fd in fault.fds:
            real_write(fd, bytes(data[: len(data) // 2]))
            raise fault.error()
        return real_write(fd, data)

    def os_close(fd):
        fault.fds.discard(fd)  # (descriptor numbers are reused)
        return real_close(fd)

    def replace(src, dst, *args, **kwargs):
        if fault.strikes(src) or fault.strikes(dst):
            fault.hits += 1
            raise OSError(fault.code, os.strerror(fault.code), str(src), None, str(dst))
        return real_replace(src, dst, *args, **kwargs)

    def serialize_file(tensors, filename, *args, **kwargs):
        if fault.strikes(filename):
            fault.error()
            raise SafetensorError(
                f"Error while serializing: I/O error: {os.strerror(fault.code)} (os error {fault.code})"
            )
        return real_serialize(tensors, filename, *args, **kwargs)

    def torch_save(obj, f, *args, **kwargs):
        if isinstance(f, str | os.PathLike) and fault.strikes(f):
            raise RuntimeError(TORCH_WRITE_FAILED)  # (then writes.named_save_errors writes it through open)
        return real_torch_save(obj, f, *args, **kwargs)

    for module, name, fake in (
        (builtins, "open", open_),
        (io, "open", open_),  # (pathlib's write_text / write_bytes open through io.open)
        (os, "open", os_open),
        (os, "write", os_write),
        (os, "close", os_close),
        (os, "replace", replace),
        (safetensors.torch, "serialize_file", serialize_file),
        (torch, "save", torch_save),
    ):
        monkeypatch.setattr(module, name, fake)


class Site(NamedTuple):
    pattern: str  # the paths written (under the test's directory)
    named: str  # the file the error line names
    flags: tuple[str, ...] = ()
    after: int = 0  # writes of it that go through first
    resume: bool = False  # on a copy of a finished run, resumed from its last checkpoint


T2 = r"out/\.tmp-checkpoint-2"
GRPO_SITES = {
    # the output directory's lock, and the run's settings (before any step: no checkpoint)
    "lock": Site(r"out/\.lock", "out/.lock"),
    "config.json": Site(r"out/config\.json(\.tmp)?", "out/config.json"),
    # the logs (metrics at step 0, before any checkpoint; the others at step 2, after checkpoint-1)
    "metrics.jsonl": Site(r"out/metrics\.jsonl", "out/metrics.jsonl"),
    "completions.jsonl": Site(r"out/completions\.jsonl", "out/completions.jsonl", after=1),
    "prompt_stats.jsonl": Site(r"out/prompt_stats\.jsonl", "out/prompt_stats.jsonl", after=1),
    "eval_failures.jsonl": Site(r"out/eval_failures\.jsonl", "out/eval_failures.jsonl", after=1),
    "beliefs.jsonl": Site(r"out/beliefs\.jsonl", "out/beliefs.jsonl", after=1),
    # a checkpoint's files: accelerate's (safetensors, torch.save), the components', the manifest, the rename
    "first checkpoint's optimizer.bin": Site(
        r"out/\.tmp-checkpoint-1/optimizer\.bin", "out/.tmp-checkpoint-1/optimizer.bin"
    ),
    "model.safetensors": Site(rf"{T2}/model\.safetensors", "out/.tmp-checkpoint-2/model.safetensors"),
    "optimizer.bin": Site(rf"{T2}/optimizer\.bin", "out/.tmp-checkpoint-2/optimizer.bin"),
    "random_states_0.pkl": Site(rf"{T2}/random_states_0\.pkl", "out/.tmp-checkpoint-2/random_states_0.pkl"),
    "batch_generator_0.json": Site(
        rf"{T2}/batch_generator_0\.json(\.tmp)?", "out/.tmp-checkpoint-2/batch_generator_0.json"
    ),
    "batch_generator_0.safetensors": Site(
        rf"{T2}/batch_generator_0\.safetensors", "out/.tmp-checkpoint-2/batch_generator_0.safetensors"
    ),
    "ref_model.safetensors": Site(
        rf"{T2}/ref_model\.safetensors",
        "out/.tmp-checkpoint-2/ref_model.safetensors",
        ("--beta", "0.1", "--sync_ref_model", "true", "--ref_model_sync_steps", "1"),
    ),
    "trainer_state.json": Site(
        rf"{T2}/trainer_state\.json(\.tmp)?", "out/.tmp-checkpoint-2/trainer_state.json"
    ),
    "grpo_config.json": Site(rf"{T2}/grpo_config\.json(\.tmp)?", "out/.tmp-checkpoint-2/grpo_config.json"),
    "manifest.json": Site(rf"{T2}/manifest\.json(\.tmp)?", "out/.tmp-checkpoint-2/manifest.json"),
    "publish (rename)": Site(T2, "out/.tmp-checkpoint-2"),
    "prune (rename)": Site(r"out/checkpoint-1", "out/checkpoint-1", ("--save_total_limit", "1"), after=1),
    # final/ (staged in final/.tmp-save, named as in final/), the figure, the report, the summary
    "final/model.safetensors": Site(
        r"out/final/\.tmp-save/model\.safetensors", "out/final/model.safetensors"
    ),
    "final/config.json": Site(r"out/final/\.tmp-save/config\.json", "out/final/config.json"),
    "final/tokenizer.json": Site(r"out/final/\.tmp-save/tokenizer\.json", "out/final/tokenizer.json"),
    "final/ (rename)": Site(r"out/final/config\.json", "out/final/config.json"),
    "plots.png": Site(r"out/plots\.png(\.tmp)?", "out/plots.png", ("--make_plots", "true")),
    "report.html": Site(r"out/report\.html(\.tmp)?", "out/report.html", ("--make_report", "true")),
    "summary.json": Site(r"out/summary\.json(\.tmp)?", "out/summary.json"),
    # resuming: the logs cut back to the checkpoint's step, and a checkpoint of the same step replaced
    "resume: metrics.jsonl cut back": Site(r"out/metrics\.jsonl\.tmp", "out/metrics.jsonl", resume=True),
    "resume: checkpoint replaced": Site(T2, "out/.tmp-checkpoint-2", resume=True),
}
RUN = "--max_steps 2 --save_steps 1 --logging_steps 1 --dataset_test_split train --allow_overlapping_splits true --make_report false".split()


def _one_error_line(err: str) -> str:
    assert "Traceback" not in err, err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), lines
    return lines[0]


def _nothing_left(root: Path) -> None:
    left = [str(p.relative_to(root)) for p in root.rglob("*") if LEFTOVERS.search(str(p.relative_to(root)))]
    assert left == []
    for log in root.rglob("*.jsonl"):  # every line whole: a failed append was cut back
        data = log.read_bytes()
        assert not data or data.endswith(b"\n"), log
        assert len(read_jsonl_lines(log)) == data.count(b"\n") - data.count(b"\n\n"), log


@pytest.fixture(scope="module")
def finished_run(seed_reference, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("finished") / "out"
    assert train_grpo.main(cli(seed_reference, out, *RUN)) == 0
    return out


@pytest.fixture
def small_figures(monkeypatch):
    """The report's and the plot's content is not what is tested here (seconds of figures): their writes are."""
    from matplotlib.figure import Figure

    monkeypatch.setattr(report, "build_report", lambda run_dir, figures=True: "<!doctype html><p>report</p>")
    monkeypatch.setattr(curves, "curves_figure", lambda rows: Figure(figsize=(1, 1)))


@pytest.mark.parametrize("code", ERRNOS, ids=errno.errorcode.get)
@pytest.mark.parametrize("site", list(GRPO_SITES))
def test_a_failed_write_of_a_run_is_one_line(
    site, code, seed_reference, finished_run, tmp_path, monkeypatch, capfd, small_figures
):
    s = GRPO_SITES[site]
    out = tmp_path / "out"
    flags = list(s.flags)
    if s.resume:
        shutil.copytree(finished_run, out)
        flags += ["--resume_from_checkpoint", "latest"]
    fault = Fault(tmp_path, s.pattern, code, s.after)
    inject(monkeypatch, fault)
    capfd.readouterr()
    rc = train_grpo.main(cli(seed_reference, out, *RUN, *flags))
    monkeypatch.undo()
    line = _one_error_line(capfd.readouterr().err)
    assert rc == 1 and fault.hits >= 1, (rc, fault.hits)
    kept = ckpt.checkpoint_dirs(out)
    assert f" ({tmp_path / s.named})" in line or f"cannot write {tmp_path / s.named}: " in line, line
    assert os.strerror(code) in line
    assert line.endswith(
        f"the last complete checkpoint is {kept[-1]}" if kept else "no checkpoint was kept"
    ), line
    if kept:
        assert ckpt.verify(kept[-1]) is None
        assert ckpt.resolve_checkpoint("latest", out, say=pytest.fail) == kept[-1]
    if s.resume:  # the replaced checkpoint is back, whole
        assert [p.name for p in kept] == ["checkpoint-1", "checkpoint-2"]
    _nothing_left(tmp_path)


@pytest.mark.parametrize("code", ERRNOS, ids=errno.errorcode.get)
def test_an_output_dir_that_cannot_be_written_is_refused_at_start(
    code, seed_reference, tmp_path, monkeypatch, capfd
):
    # The probe of check_writable: its own line, from before the last pass (the directory, not a file, is named).
    out = tmp_path / "out"
    inject(monkeypatch, Fault(tmp_path, r"out/\.write-test", code))
    capfd.readouterr()
    rc = train_grpo.main(cli(seed_reference, out, *RUN))
    monkeypatch.undo()
    assert rc == 1
    assert (
        _one_error_line(capfd.readouterr().err)
        == f"error: output_dir {out} is not writable: {os.strerror(code)}"
    )
    assert sorted(p.name for p in out.iterdir()) == []


SFT = "--dataset_name seed_bank --dataset_test_split --train_size 0 --max_steps 2 --per_device_train_batch_size 8 --n_embd 32 --n_head 2 "
SFT += (
    "--n_positions 16 --logging_steps 0 --kernels native"  # (in this process: the faults are injected here)
)
SFT_SITES = {  # the reference is staged in .tmp-save and moved into place, config.json last
    "model.safetensors": Site(r"out/\.tmp-save/model\.safetensors", "out/model.safetensors"),
    "config.json": Site(r"out/\.tmp-save/config\.json", "out/config.json"),
    "tokenizer.json": Site(r"out/\.tmp-save/tokenizer\.json", "out/tokenizer.json"),
    "sft_summary.json": Site(r"out/\.tmp-save/sft_summary\.json", "out/sft_summary.json"),
    "config.json (rename)": Site(r"out/config\.json", "out/config.json"),
}


@pytest.mark.parametrize("code", ERRNOS, ids=errno.errorcode.get)
@pytest.mark.parametrize("site", list(SFT_SITES))
def test_a_failed_write_of_the_sft_reference_is_one_line(site, code, tmp_path, monkeypatch, capfd):
    s = SFT_SITES[site]
    out = tmp_path / "out"
    argv = SFT.split()
    argv.insert(argv.index("--dataset_test_split") + 1, "")
    fault = Fault(tmp_path, s.pattern, code)
    inject(monkeypatch, fault)
    capfd.readouterr()
    rc = train_sft.main(["--output_dir", str(out), *argv])
    monkeypatch.undo()
    line = _one_error_line(capfd.readouterr().err)
    assert rc == 1 and fault.hits >= 1
    assert (
        line == f"error: cannot write {tmp_path / s.named}: {os.strerror(code)}; no model was saved in {out}"
    )
    assert not (
        out / "config.json"
    ).exists()  # not a model: a later run neither loads it nor refuses to replace it
    _nothing_left(tmp_path)


def test_a_real_file_size_limit_while_the_portable_reference_is_written(tmp_path, capfd):
    # The portable kernels train in a child process (tinygrpo.sft.train.train_in_child), where no fault can be
    # injected from here: ulimit -f, which the child inherits (as it inherits Python's ignored SIGXFSZ), fails its
    # write of the weights (~0.13 MB) for real; the failure comes back as the same one line.
    out = tmp_path / "out"
    argv = SFT.replace(" --kernels native", "").split()
    argv.insert(argv.index("--dataset_test_split") + 1, "")
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    capfd.readouterr()
    resource.setrlimit(resource.RLIMIT_FSIZE, (50_000, hard))
    try:
        rc = train_sft.main(["--output_dir", str(out), *argv])
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
    line = _one_error_line(capfd.readouterr().err)
    assert rc == 1 and line.startswith("error: cannot write ") and "model.safetensors" in line, line
    assert line.endswith(f": {os.strerror(errno.EFBIG)}; no model was saved in {out}"), line
    assert not (out / "config.json").exists()
    _nothing_left(tmp_path)


@pytest.mark.parametrize("code", ERRNOS, ids=errno.errorcode.get)
def test_a_report_that_cannot_be_written_is_one_line(
    code, finished_run, tmp_path, monkeypatch, capsys, small_figures
):
    run = shutil.copytree(finished_run, tmp_path / "run")
    before = (run / "report.html").read_bytes() if (run / "report.html").exists() else None
    inject(monkeypatch, Fault(tmp_path, r"run/report\.html(\.tmp)?", code))
    rc = report.main([str(run)])
    monkeypatch.undo()
    assert rc == 1
    assert (
        _one_error_line(capsys.readouterr().err)
        == f"error: cannot write {run / 'report.html'}: {os.strerror(code)}"
    )
    assert ((run / "report.html").read_bytes() if (run / "report.html").exists() else None) == before
    _nothing_left(tmp_path)


@pytest.mark.parametrize(
    ("limit", "named"),
    [(50_000, "model.safetensors"), (150_000, "optimizer.bin")],
    ids=["safetensors", "torch.save"],
)
def test_a_real_file_size_limit_while_a_checkpoint_is_written(limit, named, seed_reference, tmp_path, capfd):
    # ulimit -f, no injection: the first checkpoint file larger than the limit fails as its writer really fails
    # (safetensors: "File too large (os error 27)"; torch's C++ writer: a RuntimeError without the errno). The
    # seed-bank run's weights are ~0.1 MB, the optimizer's state ~0.23 MB, every other file smaller. (In this
    # process, for the time of the run: Python ignores SIGXFSZ, so a write past the limit is EFBIG.)
    out = tmp_path / "out"
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    capfd.readouterr()
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, hard))
    try:
        rc = train_grpo.main(cli(seed_reference, out, *RUN))
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
    assert rc == 1
    assert _one_error_line(capfd.readouterr().err) == (
        f"error: step 1: could not write the checkpoint: {os.strerror(errno.EFBIG)} "
        f"({out}/.tmp-checkpoint-1/{named}); no checkpoint was kept"
    )
    _nothing_left(tmp_path)
