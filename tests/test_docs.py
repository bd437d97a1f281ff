"""The documentation: the site builds with `mkdocs build --strict`, the generated experiment pages and the
README's results block match the committed data they are made from, and the README stays a front page."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks import pages

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"


def test_generated_pages_match_their_data() -> None:
    """Every generated page (and the README's block) is what its committed JSON lines render to."""
    assert pages.PAGES, "no generated pages registered"
    rendered = pages.render_pages()
    for path, text in rendered.items():
        page = REPO / "docs" / path
        assert page.exists(), f"docs/{path} is missing: run `python -m benchmarks.report docs`"
        assert page.read_text() == text, \
            f"docs/{path} is out of date with its data: run `python -m benchmarks.report docs`"
    readme = README.read_text()
    assert pages.render_readme(readme) == readme, "README.md's generated block is out of date: run " \
        "`python -m benchmarks.report docs`"
    assert pages.stale() == []


def test_a_changed_json_line_makes_its_page_stale(tmp_path: Path) -> None:
    """Changing one committed number without regenerating fails the check, for a page and for the README."""
    docs = tmp_path / "docs"
    shutil.copytree(REPO / "docs", docs)
    shutil.copy2(README, tmp_path / "README.md")
    assert pages.stale(docs) == []
    curve = docs / "learning_curves" / "tr512" / "dmc_cartpole-swingup.jsonl"
    lines = curve.read_text().splitlines()
    official = [k for k, x in enumerate(lines) if json.loads(x).get("impl") == "official"]
    i = max(official, key=lambda k: json.loads(lines[k])["env_steps"])  # a judged window: on the README too
    rec = json.loads(lines[i])
    rec["score"] += 1000.0
    lines[i] = json.dumps(rec)
    curve.write_text("\n".join(lines) + "\n")
    assert pages.stale(docs) == ["docs/experiments/curves-tr512.md", "docs/experiments/targets.md", "README.md"]
    speed = docs / "wm_throughput_h100.jsonl"
    speed.write_text(speed.read_text().replace('"train_step_median_s": 0.028', '"train_step_median_s": 0.029', 1))
    assert "docs/experiments/speed.md" in pages.stale(docs)
    assert pages.write(docs) and pages.stale(docs) == []


def test_the_competence_reading_page_is_made_from_its_json(tmp_path: Path) -> None:
    """docs/self-regulation.md links the two readings' figures; they live on a generated page, so a changed
    figure in docs/competence_reading_quickstart.json without a regenerated page fails the check."""
    assert "experiments/competence-reading.md" in pages.PAGES
    assert "experiments/competence-reading.md" in (REPO / "docs" / "self-regulation.md").read_text()
    docs = tmp_path / "docs"
    shutil.copytree(REPO / "docs", docs)
    shutil.copy2(README, tmp_path / "README.md")
    data = docs / "competence_reading_quickstart.json"
    d = json.loads(data.read_text())
    d["runs"]["from_start"]["adapt"]["sa_auroc"] = 0.123
    data.write_text(json.dumps(d, indent=1) + "\n")
    assert pages.stale(docs) == ["docs/experiments/competence-reading.md"]
    assert "| 0.12 |" in pages.render_pages(docs)["experiments/competence-reading.md"]


def test_report_docs_check_cli(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "benchmarks.report", "docs", "--check"], cwd=REPO,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    listed = subprocess.run([sys.executable, "-m", "benchmarks.report", "docs", "--list"], cwd=REPO,
                            capture_output=True, text=True, timeout=300)
    assert listed.returncode == 0 and "docs/experiments/curves-tr512.md" in listed.stdout, listed.stderr


def test_every_generated_page_says_how_it_was_made() -> None:
    """Command, machine, budget, seeds and one sentence on what it shows, for every section with a table."""
    for path, text in pages.render_pages().items():
        for section in re.split(r"\n## ", text):
            if "\n| " not in section:
                continue
            for word in ("**What it shows.**", "```bash", "- Machine:", "- Budget:", "- Seeds:"):
                assert word in section, (path, section[:80], word)


def test_readme_is_a_front_page() -> None:
    """Short, in the present tense, with the two commands CI and a newcomer run."""
    text = README.read_text()
    assert len(text.splitlines()) <= 300
    for history in ("until this change", "new with this", "it used to", "used to ", "the default since",
                    "(commit "):
        assert history not in text.lower(), history
    assert "bash scripts/setup.sh && bash scripts/quickstart.sh" in text
    ci = (REPO / ".ci" / "run").read_text().strip().splitlines()[-1]
    assert f"```bash\n{ci}\n```" in text, f"the README's test command is not what .ci/run runs ({ci})"
    figures = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", text)
    assert 1 <= len(figures) <= 3, figures
    shown = "".join(pages.render_pages().values())
    for fig in figures:
        assert (REPO / fig).exists(), fig
        assert Path(fig).relative_to("docs").as_posix() in shown, f"{fig} is on no generated page"
    for link in re.findall(r"\]\((docs/[^)#]+)", text):
        assert (REPO / link).exists(), link


def test_every_nav_page_exists_and_every_page_is_in_nav() -> None:
    nav = re.findall(r":\s*([\w./-]+\.md)\s*$", (REPO / "mkdocs.yml").read_text(), re.M)
    for p in nav:
        assert (REPO / "docs" / p).exists(), p
    for p in pages.PAGES:
        assert p in nav, f"generated page docs/{p} is not in mkdocs.yml's nav"


@pytest.mark.slow
def test_mkdocs_build_strict(tmp_path: Path) -> None:
    """The site builds with no warning: a broken link, a missing nav page or a docstring mkdocstrings cannot
    render fails here. The API pages render the public functions' docstrings."""
    env = {"NO_MKDOCS_2_WARNING": "1", "PATH": str(Path(sys.executable).parent) + ":/usr/bin:/bin"}
    proc = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(tmp_path / "site")],
                          cwd=REPO, capture_output=True, text=True, timeout=600, env=env)
    assert proc.returncode == 0, proc.stderr[-4000:]
    api = (tmp_path / "site" / "api" / "muse_jax" / "index.html").read_text()
    assert "load_agent" in api and "doc-function" in api
    assert "load_agent" in (REPO / "muse_jax" / "loops" / "restore.py").read_text()
