"""One source for every number (studies/results.py): every table of the README and the docs that shows results is
drawn from a committed results file, and drawing it again gives what the doc holds."""

from __future__ import annotations

import pytest

from studies import results

# Tables that list things rather than results (a reference to read, not a measurement).
REFERENCE_TABLES = {
    "| package | owns | imports |",
    "| component | its state | in a checkpoint |",
    "| you want | touch | and |",
    "| task | problems | completion | verifier (held-out accuracy) | other rewards |",
    "| script | measures |",
    "| file | what it holds |",
}


def marked() -> list[tuple[str, str, str, str]]:
    return [
        (str(path.relative_to(results.REPO)), m["fn"], m["data"], m["body"])
        for path in results.DOCS
        for m in results.MARKER.finditer(path.read_text())
    ]


@pytest.mark.parametrize("doc, fn, data, body", marked(), ids=lambda v: v if "\n" not in v else "")
def test_every_marked_table_is_drawn_again_from_its_results(doc, fn, data, body):
    assert results.render(fn, data) == body.strip("\n"), (
        f"{doc}: the table of {fn} is not what {data} draws: run python -m studies.results"
    )


def test_no_results_table_outside_markers():
    stray = {
        str(path.relative_to(results.REPO)): [
            t for t in results.unmarked_tables(path.read_text()) if t not in REFERENCE_TABLES
        ]
        for path in results.DOCS
    }
    assert not {k: v for k, v in stray.items() if v}, stray


def test_each_results_file_is_its_runs_whole_record_or_says_what_it_lacks():
    """A results file records the command, the machine (CPU, cores, threads, kernels, accelerator), the packages'
    versions, the commit and the date, as its run wrote them; one that does not (transcribed from printed tables,
    or written before these were recorded) carries a caveat, which every table drawn from it shows."""
    files = sorted(results.RESULTS.glob("*.json"))
    assert files
    for f in files:
        data = results.load(f)
        m = data["measurement"]
        assert m["command"] and m["machine"]["cpu"], f
        if results.caveat(data) is None:
            assert not results.missing_record(data), (f, results.missing_record(data))
        else:
            assert isinstance(m["caveat"], str) and m["caveat"].strip(), f


def test_the_readme_draws_no_number_from_a_file_with_a_caveat():
    readme = (results.REPO / "README.md").read_text()
    drawn = {m["data"] for m in results.MARKER.finditer(readme)}
    assert drawn
    flagged = {d: results.caveat(results.load(d)) for d in drawn if results.caveat(results.load(d))}
    assert not flagged, flagged
    incomplete = {d: results.missing_record(results.load(d)) for d in drawn}
    assert not any(incomplete.values()), incomplete


def test_the_readmes_results_come_from_one_machine():
    """The README names one machine for its figures: every file it draws from was measured on one CPU kind."""
    readme = (results.REPO / "README.md").read_text()
    machines = {
        (m["cpu"], m["cores"], m["kernels"])
        for d in {x["data"] for x in results.MARKER.finditer(readme)}
        for m in [results.load(d)["measurement"]["machine"]]
    }
    assert len(machines) == 1, machines


def test_a_measurement_is_a_whole_record_and_a_caveat_shows_under_its_tables(tmp_path, monkeypatch):
    m = results.measurement("python -m studies.x --seeds 42", threads=1, jobs=2)
    assert not results.missing_record({"measurement": m}), m
    assert m["machine"]["threads"] == "1" and m["threads"] == 1 and m["jobs"] == 2
    assert m["versions"]["torch"] and m["versions"]["transformers"] and m["date"].endswith("+00:00")
    assert len(m["commit"].split("+")[0]) == 40 or m["commit"] == "unknown"
    # Take a field away: it is named.
    gone = {**m, "machine": {k: v for k, v in m["machine"].items() if k != "kernels"}}
    del gone["versions"]
    assert results.missing_record({"measurement": gone}) == ["versions", "machine.kernels"]
    # A caveat is shown under a table, whatever function draws it.
    data = tmp_path / "tasks.json"
    original = results.load("docs/results/tasks.json")
    whole = {**original, "measurement": {k: v for k, v in original["measurement"].items() if k != "caveat"}}
    results.save(data, whole)
    plain = results.render("studies.tasks:table", str(data))
    assert "Not rerun" not in plain
    results.save(data, {**whole, "measurement": {**whole["measurement"], "caveat": "typed by hand"}})
    assert results.render("studies.tasks:table", str(data)) == plain + "\n\n*(Not rerun: typed by hand.)*"


def test_a_marker_is_rendered_in_place_and_nothing_else_changes(tmp_path):
    doc = tmp_path / "doc.md"
    head = "text before\n\n<!-- results studies.tasks:table docs/results/tasks.json -->\n"
    doc.write_text(head + "| stale |\n<!-- /results -->\n\ntext after\n")
    assert results.write_docs([doc]) == [doc]
    text = doc.read_text()
    assert (
        text.startswith(head) and text.endswith("<!-- /results -->\n\ntext after\n") and "stale" not in text
    )
    assert results.write_docs([doc]) == []  # rendered: idempotent


def test_a_study_run_on_some_tasks_keeps_the_other_rows():
    """studies.tasks and studies.forecast run on a few tasks: their rows are replaced, the others and the file's other
    fields kept, in the study's order and then any other task's."""
    old = {"measurement": "old", "steps": 20, "tasks": [{"task": t, "v": 0} for t in ("b", "z", "a")]}
    new = {"measurement": "new", "steps": 20, "tasks": [{"task": "a", "v": 1}, {"task": "c", "v": 1}]}
    out = results.merged(old, new, order=("a", "b", "c"))
    assert [(t["task"], t["v"]) for t in out["tasks"]] == [("a", 1), ("b", 0), ("c", 1), ("z", 0)]
    assert (out["measurement"], out["steps"]) == ("old", 20) and old["tasks"][2] == {"task": "a", "v": 0}
    assert results.merged(None, new, order=()) is new
    # A run that replaces every row is the file's record now (an earlier caveat goes with the rows it was about).
    every = {"measurement": "new", "tasks": [{"task": t, "v": 2} for t in ("a", "b", "z")]}
    assert results.merged(old, every, order=())["measurement"] == "new"
    # (studies.tools: its rows are arms)
    arms = results.merged(
        {"arms": [{"arm": "x", "v": 0}]}, {"arms": [{"arm": "y", "v": 1}]}, ("y", "x"), "arms", "arm"
    )
    assert arms["arms"] == [{"arm": "y", "v": 1}, {"arm": "x", "v": 0}]
