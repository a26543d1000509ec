"""A report folder keeps what the report did not write: ``remove_stale`` removes only the files the
previous build listed in its manifest and this build no longer writes."""

from pathlib import Path

from cemlab.report.pages.writers import MANIFEST, remove_stale


def _files(d: Path) -> set[str]:
    return {p.name for p in d.iterdir()}


def test_removes_only_what_the_last_build_wrote(tmp_path):
    for name in ("fig.png", "old.pdf", "old.csv", "notes-every-choice.csv", "README.md"):
        (tmp_path / name).write_text(name)
    (tmp_path / MANIFEST).write_text("fig.png\nold.pdf\nold.csv\n")
    assert remove_stale(tmp_path, {"fig.png", "index.html"}) == ["old.csv", "old.pdf"]
    # the researcher's files stay, though they look like report files (.csv, .md)
    assert _files(tmp_path) == {"fig.png", "notes-every-choice.csv", "README.md", MANIFEST}
    assert (tmp_path / MANIFEST).read_text().split() == ["fig.png", "index.html"]
    # the next build reads the new manifest: index.html, no longer written, goes; fig.png stays
    (tmp_path / "index.html").write_text("x")
    assert remove_stale(tmp_path, {"fig.png"}) == ["index.html"]
    assert "notes-every-choice.csv" in _files(tmp_path)


def test_a_folder_without_a_manifest_loses_nothing(tmp_path):
    for name in ("fig.png", "comparisons-20261128-every-choice.csv", "index.md"):
        (tmp_path / name).write_text(name)
    assert remove_stale(tmp_path, {"index.md"}) == []
    assert _files(tmp_path) == {"fig.png", "comparisons-20261128-every-choice.csv", "index.md", MANIFEST}


def test_a_manifest_cannot_reach_outside_its_folder(tmp_path):
    out, outside = tmp_path / "report", tmp_path / "results.csv"
    out.mkdir()
    (out / "sub").mkdir()
    (out / "sub" / "x.csv").write_text("x")
    outside.write_text("mine")
    (out / MANIFEST).write_text(f"../results.csv\n{outside}\nsub/x.csv\nsub\n")
    assert remove_stale(out, set()) == []
    assert outside.read_text() == "mine" and (out / "sub" / "x.csv").is_file()
