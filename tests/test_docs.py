"""The documents a user reads: every link resolves, the project speaks of itself only, raw results are cited.

- Links: every relative markdown link in README.md, CHANGELOG.md, docs/ and benchmarks/ names a file that exists
  and, with ``#anchor``, a heading of that file; every ``docs/....md#anchor`` named in code, tests or scripts too.
- Words: README.md, CHANGELOG.md, docs/, benchmarks/ and scripts/ say nothing of how the project is developed
  (paths into the developers' shared folder, sessions, the tool that lends GPU machines, what it carries,
  issue numbers, the internal seeds). Upstream references such as ``nerfstudio#3683`` are fine.
- Commit hashes appear in prose only on a results stamp's line (one naming a version or commit).
- docs/results/ holds only what a page cites: each file is linked from README.md, a page of docs/ or the code, or
  from a markdown file in docs/results that is itself cited.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Dict, Iterator, List, Set, Tuple

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "docs" / "results"
README_MAX_LINES = 150

DEVELOPMENT_WORDS: Dict[str, str] = {
    "a path into the developers' shared folder": r"(\.\./|/work/)shared\b",
    "a development session": r"\bsessions?\b",
    "the device tool": r"\bdevice[- ]tools?\b",
    "what a device run carries": r"\bcarry\s*[:=]|\brun's carry\b|`carry`",
    "a lent machine": r"\blent\b",
    "an issue number": r"(?<![\w#/])issues?\s+(no\.?\s*)?#?\d+",
    "an internal seed": r"\bseeds?\s+0\d\d\b",
}
"""What each forbidden pattern means -> the pattern (case-insensitive)."""

TEXT_SUFFIXES = {".md", ".txt", ".json", ".csv", ".py", ".sh", ".yml", ".yaml"}
COMMIT = re.compile(r"(?<![\w/.-])(?=[0-9a-f]*\d)(?=[0-9a-f]*[a-f])[0-9a-f]{7,40}(?![\w/-])(?!\.\w)")
STAMP_LINE = re.compile(r"\b(measured|commit|version)\b", re.IGNORECASE)
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
CODE_DOC_REFERENCE = re.compile(r"\bdocs/[\w./-]+\.md(?:#[\w-]+)?")


# --- the pieces, each tested on its own -----------------------------------------------------------


def development_words(text: str) -> List[Tuple[int, str, str]]:
    """(line number, meaning, matched text) for every forbidden pattern in ``text``."""
    found = []
    for number, line in enumerate(text.splitlines(), start=1):
        for meaning, pattern in DEVELOPMENT_WORDS.items():
            found += [(number, meaning, match.group(0)) for match in re.finditer(pattern, line, re.IGNORECASE)]
    return found


def heading_anchors(markdown: str) -> Set[str]:
    """The anchors GitHub gives the headings of ``markdown`` (lower case, punctuation dropped, spaces to hyphens,
    ``-1``, ``-2``... for repeats); headings inside fenced code blocks are not headings."""
    anchors: Set[str] = set()
    counts: Dict[str, int] = {}
    for line in prose_lines(markdown):
        match = re.match(r"#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not match:
            continue
        slug = re.sub(r"[^\w\- ]", "", match.group(1).lower()).replace(" ", "-")
        anchors.add(slug if slug not in counts else f"{slug}-{counts[slug]}")
        counts[slug] = counts.get(slug, 0) + 1
    return anchors


def prose_lines(markdown: str) -> Iterator[str]:
    """The lines of ``markdown`` outside fenced code blocks."""
    fenced = False
    for line in markdown.splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
        elif not fenced:
            yield line


def commits_off_stamps(markdown: str) -> List[str]:
    """Commit-like hex words in prose (links' targets and code blocks aside) on lines that are not a stamp."""
    found = []
    for line in prose_lines(markdown):
        words = COMMIT.findall(LINK.sub("", line))
        if words and not STAMP_LINE.search(line):
            found += words
    return found


def relative_links(markdown: str) -> List[str]:
    """Targets of the markdown links and images of ``markdown`` that point into the repository."""
    return [
        target
        for target in LINK.findall("\n".join(prose_lines(markdown)))
        if not re.match(r"[a-z][a-z0-9+.-]*:", target) and not target.startswith("#")
    ]


def link_problem(source: Path, target: str) -> str:
    """Why ``target`` (a link in ``source``, or a repository-relative path when ``source`` is the repository)
    does not resolve; empty when it does."""
    path_part, _, anchor = target.partition("#")
    base = source if source.is_dir() else source.parent
    path = (base / path_part).resolve() if path_part else source
    if not path.exists():
        return f"{target}: no such file"
    if anchor and anchor not in heading_anchors(path.read_text(encoding="utf-8")):
        return f"{target}: no heading with the anchor #{anchor} in {path.relative_to(REPO)}"
    return ""


def test_development_words_finds_each_kind() -> None:
    text = (
        "data in ../shared/data/lego\nthis session\nthrough the device tool\ncarry: ['.gpu']\non a lent GPU\n"
        "(issue 38)\nseed 002\n"
    )
    meanings = [meaning for _, meaning, _ in development_words(text)]
    assert set(meanings) == set(DEVELOPMENT_WORDS)
    assert not development_words("upstream: nerfstudio#3683, gsplat/issues/635; it carries the gradient; relentless")


def test_heading_anchors_and_commits_off_stamps() -> None:
    markdown = (
        "# Adam's second moment\n```\n# not a heading\n```\n## `--precision`: fp32 vs bf16\n## Adam's second moment\n"
    )
    assert heading_anchors(markdown) == {"adams-second-moment", "--precision-fp32-vs-bf16", "adams-second-moment-1"}
    prose = (
        "made faster by 10923c4.\nMeasured at commit 10923c4.\n[raw](results/x_10923c4/results.json) 1234567 deadbeef"
    )
    assert commits_off_stamps(prose) == ["10923c4"]


# --- the documents ---------------------------------------------------------------------------------------


def documents() -> List[Path]:
    """The markdown a user reads: README.md, CHANGELOG.md, docs/ (raw results included) and benchmarks/."""
    found = [REPO / "README.md", REPO / "CHANGELOG.md"]
    return found + sorted((REPO / "docs").rglob("*.md")) + sorted((REPO / "benchmarks").rglob("*.md"))


def user_facing_files() -> List[Path]:
    """Every text file of README.md, CHANGELOG.md, docs/, benchmarks/ and scripts/."""
    found = [REPO / "README.md", REPO / "CHANGELOG.md"]
    for folder in ("docs", "benchmarks", "scripts"):
        found += sorted(path for path in (REPO / folder).rglob("*") if path.suffix in TEXT_SUFFIXES)
    return found


def test_the_project_speaks_of_itself_only() -> None:
    problems = [
        f"{path.relative_to(REPO)}:{number}: {meaning} ({matched!r})"
        for path in user_facing_files()
        for number, meaning, matched in development_words(path.read_text(encoding="utf-8", errors="replace"))
    ]
    assert not problems, "\n".join(problems)


def test_commit_hashes_only_on_stamps() -> None:
    pages = [REPO / "README.md", REPO / "CHANGELOG.md", *sorted((REPO / "docs").glob("*.md"))]
    problems = {str(page.relative_to(REPO)): commits_off_stamps(page.read_text(encoding="utf-8")) for page in pages}
    assert not {page: words for page, words in problems.items() if words}


def test_links_in_documents_resolve() -> None:
    problems = [
        f"{path.relative_to(REPO)}: {problem}"
        for path in documents()
        for target in relative_links(path.read_text(encoding="utf-8"))
        if (problem := link_problem(path, target))
    ]
    assert not problems, "\n".join(problems)


def test_docs_named_in_code_exist() -> None:
    problems = []
    for folder in ("nerfstudio_accel", "tests", "benchmarks", "scripts"):
        for path in sorted((REPO / folder).rglob("*")):
            if path.suffix not in {".py", ".sh"} or path == Path(__file__):
                continue
            for reference in CODE_DOC_REFERENCE.findall(path.read_text(encoding="utf-8")):
                if problem := link_problem(REPO, reference):
                    problems.append(f"{path.relative_to(REPO)}: {problem}")
    assert not problems, "\n".join(problems)


def cited_results() -> Set[Path]:
    """The files of docs/results that README.md, a page of docs/ or the package's code links to, and what a cited
    markdown file in docs/results links to in turn."""
    pending = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
    for path in sorted((REPO / "nerfstudio_accel").rglob("*.py")):
        pending += [REPO / reference for reference in re.findall(r"docs/results/[\w./-]+\.md", path.read_text())]
    cited: Set[Path] = set()
    while pending:
        page = pending.pop()
        if page in cited or not page.is_file():
            continue
        if RESULTS in page.parents:
            cited.add(page)
        if page.suffix == ".md":
            targets = (
                page.parent / link.partition("#")[0] for link in relative_links(page.read_text(encoding="utf-8"))
            )
            pending += [target.resolve() for target in targets if RESULTS in target.resolve().parents]
    return cited


def test_results_hold_only_cited_measurements() -> None:
    uncited = [
        str(path.relative_to(REPO))
        for path in sorted(RESULTS.rglob("*"))
        if path.is_file() and path not in cited_results() and path != RESULTS / "README.md"
    ]
    assert not uncited, "files in docs/results that no page cites (delete them, git keeps them):\n" + "\n".join(uncited)


def test_readme_fits_its_budget() -> None:
    lines = (REPO / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= README_MAX_LINES, f"README.md has {len(lines)} lines; keep it to {README_MAX_LINES}"
