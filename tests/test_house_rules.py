"""Rules of the house that no linter knows: citations and documented import paths.

- Code, clients and tests cite the project's own documents (docs/design.md, the README,
  docs/gateway.md), never the numbers of source documents or tracker entries that a
  reader of the repository does not have (CONTRIBUTING.md, "Citing the rules").
- Every import the README and docs/ show works, the deprecated module paths of
  CHANGELOG.md ("Module paths") included.
"""

from __future__ import annotations

import importlib
import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

#: The folders whose text must cite only the project's documents.
CITING_FOLDERS = ("django_jobqueue", "clients", "tests")
#: A seed document's number in any case, and a lower-case "issue <digit>" (the example project's
#: newsletter model is an ``Issue`` titled "Issue 1", which cites nothing). Built from
#: pieces so that this file does not match itself.
FORBIDDEN = re.compile("(?i:se" + "ed 0)|is" + "sue [0-9]")
#: Files that are not text a reader reads as the project's own.
SKIPPED_PARTS = ("node_modules", "package-lock.json")


def tracked_files(*folders: str) -> list[Path]:
    """Return the files git tracks under ``folders`` (paths relative to the checkout)."""
    out = subprocess.run(
        ["git", "ls-files", "-z", "--", *folders],
        cwd=ROOT,
        capture_output=True,
        check=True,
    ).stdout.decode()
    return [Path(p) for p in out.split("\0") if p]


def citations(paths: list[Path]) -> list[str]:
    """Return ``path:line: text`` for every forbidden citation in the text files ``paths``."""
    found = []
    for rel in paths:
        if any(part in rel.parts or rel.name == part for part in SKIPPED_PARTS):
            continue
        data = (ROOT / rel).read_bytes()
        if b"\0" in data:  # binary (an image, a key)
            continue
        for number, line in enumerate(data.decode("utf-8", "replace").splitlines(), 1):
            if FORBIDDEN.search(line):
                found.append(f"{rel}:{number}: {line.strip()}")
    return found


def test_citations__code_clients_and_tests_cite_the_projects_own_docs() -> None:
    found = citations(tracked_files(*CITING_FOLDERS))
    assert not found, "cite docs/design.md, the README or docs/gateway.md instead:\n" + (
        "\n".join(found)
    )


def test_citations__the_check_finds_a_planted_citation(tmp_path: Path) -> None:
    planted = ROOT / "tests" / f"_planted_{tmp_path.name}.py"
    planted.write_text('"""Rule of se' + "ed 004, and is" + 'sue 12."""\n')
    try:
        found = citations([planted.relative_to(ROOT)])
    finally:
        planted.unlink()
    assert len(found) == 1
    assert found[0].endswith("is" + 'sue 12."""')


#: ``from X import a, b`` or ``import X`` of the package (or of its client's distribution,
#: ``jobqueue_client``), in a Python code block.
IMPORT = re.compile(
    r"^\s*(?:from\s+((?:django_jobqueue|jobqueue_client)[\w.]*)\s+import\s+\(?([\w\s,]+?)\)?\s*(?:#.*)?$"
    r"|import\s+((?:django_jobqueue|jobqueue_client)[\w.]*)\s*(?:#.*)?$)",
    re.MULTILINE,
)
CODE_BLOCK = re.compile(r"```python\n(.*?)```", re.DOTALL)


def documented_imports() -> list[tuple[str, str | None]]:
    """Return (module, name or None) for every import of the package in the docs' code."""
    pairs: set[tuple[str, str | None]] = set()
    for doc in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for block in CODE_BLOCK.findall(doc.read_text()):
            for module, names, plain in IMPORT.findall(block):
                if plain:
                    pairs.add((plain, None))
                    continue
                for name in names.split(","):
                    name = name.strip().split(" as ")[0].strip()
                    if name:
                        pairs.add((module, name))
    return sorted(pairs, key=lambda pair: (pair[0], pair[1] or ""))


#: The deprecated module paths (CHANGELOG.md, "Module paths") and a name from each.
DEPRECATED = [
    ("django_jobqueue.exceptions", "NonRetryableError"),
    ("django_jobqueue.apitokens", "issue_token"),
    ("django_jobqueue.licence", "verify_licence"),
]


def test_documented_imports__are_found_in_the_docs() -> None:
    modules = {module for module, _name in documented_imports()}
    assert {
        "django_jobqueue",
        "django_jobqueue.ids",
        "django_jobqueue.client",
        "django_jobqueue.client.errors",
        "jobqueue_client",
    } <= modules


@pytest.mark.parametrize(
    ("module", "name"),
    [*documented_imports(), *DEPRECATED],
    ids=lambda value: value or "-",
)
def test_documented_imports__work(module: str, name: str | None) -> None:
    imported = importlib.import_module(module)
    if name is not None:
        assert hasattr(imported, name) or importlib.util.find_spec(f"{module}.{name}")


def test_deprecated_paths__are_the_same_objects() -> None:
    from django_jobqueue.apitokens import issue_token
    from django_jobqueue.core.exceptions import NonRetryableError
    from django_jobqueue.exceptions import NonRetryableError as Old
    from django_jobqueue.licence import verify_licence
    from django_jobqueue.store.apitokens import issue_token as new_issue_token
    from django_jobqueue.store.licence import verify_licence as new_verify

    assert Old is NonRetryableError
    assert issue_token is new_issue_token
    assert verify_licence is new_verify


def test_deprecated_paths__python_m_licence_still_runs() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "django_jobqueue.licence", "--help"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "keygen" in done.stdout
