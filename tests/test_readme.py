"""The README answers in five minutes: short, and what the project produces on its first screens."""

from __future__ import annotations

import itertools
import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()


def _words(path: str) -> int:
    return len((ROOT / path).read_text().split())  # as `wc -w` counts


def test_the_readme_has_at_most_2500_words_and_docs_results_at_most_3000():
    assert _words("README.md") <= 2500
    assert _words("docs/results.md") <= 3000


def test_the_readme_shows_the_four_methods_side_by_side_with_a_consistency_column():
    table = [line for line in README.splitlines() if line.startswith("| method |")]
    assert table, "no four-method table"
    header = [cell.strip() for cell in table[0].strip("|").split("|")]
    assert "semantic consistency" in header
    rows = re.findall(r"^\| (simclr|mocov2plus|ncl|bayesncl) \|", README, flags=re.M)
    assert rows == ["simclr", "mocov2plus", "ncl", "bayesncl"]


def test_the_first_screens_show_the_table_and_a_dashboard_picture_before_the_findings():
    findings = README.index("## Findings")
    picture = README.index("](docs/img/dashboard_index.png)")
    assert README.index("| method |") < findings and picture < findings
    assert (ROOT / "docs/img/dashboard_index.png").is_file()


def test_the_findings_have_one_figure_beside_the_papers_figures():
    section = README.split("## Findings", 1)[1].split("\n## ", 1)[0]
    pictures = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", section)
    assert pictures == ["docs/img/relative_to_ncl.png"]
    assert (ROOT / pictures[0]).is_file()
    for paper in ("+142.1%", "+122.2%", "+5.0%"):
        assert paper in section, paper


def test_the_findings_open_with_a_one_sentence_answer_before_the_table():
    section = README.split("## Findings", 1)[1].split("\n## ", 1)[0]
    answer = " ".join(section.strip().split("\n\n", 1)[0].split())
    assert not answer.startswith(("|", "!")) and answer.endswith(".") and "?" not in answer
    assert len(re.findall(r"[.!?](?:\s|$)", answer)) == 1, "one sentence"
    assert section.index(answer.split()[0]) < section.index("| dataset")
    header = next(line for line in section.splitlines() if line.startswith("| dataset"))
    assert "consistency x100" in header  # the paper's unit, beside its relative figures


def test_the_readme_and_docs_links_to_files_of_the_repository_exist():
    for document in ("README.md", "docs/results.md", "study/README.md", "study/log.md"):
        text = (ROOT / document).read_text()
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text):
            if target.startswith(("http://", "https://")):
                continue
            assert (ROOT / document).parent.joinpath(target).exists(), f"{document}: {target}"


def _bash_block_after(heading: str) -> list[str]:
    """The lines of the first ``bash`` block under ``heading``."""
    section = README.split(heading, 1)[1]
    return section.split("```bash\n", 1)[1].split("```", 1)[0].splitlines()


def test_the_quick_start_runs_as_written_in_a_new_shell_without_an_activated_environment(
    tmp_path,
):
    # a new shell: no environment activated, and a `python` on PATH that is not the project's
    venv = ROOT / ".venv"
    if not (venv / "bin" / "activate").is_file():
        pytest.skip("no .venv in the checkout (set up with VENV=, into the interpreter itself)")
    stranger = tmp_path / "bin"
    stranger.mkdir()
    (stranger / "python").write_text("#!/bin/sh\necho 'a python without the project' >&2\nexit 1\n")
    (stranger / "python").chmod(0o755)
    block = _bash_block_after("## Quick start")
    before_first_command = list(itertools.takewhile(lambda line: "python " not in line, block))
    check = "python -c 'import omegaconf, solo_bayesncl, sys; print(sys.prefix)'"
    script = "\n".join([*before_first_command, check])
    env = {"PATH": f"{stranger}:/usr/local/bin:/usr/bin:/bin", "HOME": str(tmp_path)}
    done = subprocess.run(
        ["bash", "-e", "-c", script], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert Path(done.stdout.strip()).resolve() == venv.resolve()
