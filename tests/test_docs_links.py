"""Every relative link of the project's Markdown files (README, docs/, examples/) names a
file or folder that exists, counted from the linking file's folder as a Markdown viewer
resolves it."""
import pathlib
import re
import subprocess

ROOT = pathlib.Path(__file__).resolve().parents[1]
LINK = re.compile(r"\]\(([^)\s]+)\)")


def relative_links(text: str) -> list:
    """The targets of ``[text](target)`` that are paths: no scheme, no mail, no bare anchor;
    a target's own ``#anchor`` is cut off."""
    targets = []
    for target in LINK.findall(text):
        if re.match(r"[a-z]+:", target) or target.startswith("#"):
            continue
        targets.append(target.split("#")[0])
    return targets


def test_the_link_reader_keeps_paths_only():
    assert relative_links("[a](docs/x.md#y) [b](https://x.org) [c](#top) "
                          "![f](figures/p.png) [m](mailto:a@b)") == ["docs/x.md", "figures/p.png"]


def test_every_relative_link_of_the_markdown_files_resolves():
    files = subprocess.run(["git", "ls-files", "*.md"], cwd=ROOT, capture_output=True,
                           text=True, check=True).stdout.split()
    assert "README.md" in files and "docs/RESULTS.md" in files
    broken = [f"{name}: {target}" for name in files
              for target in relative_links((ROOT / name).read_text(encoding="utf-8"))
              if not ((ROOT / name).parent / target).exists()]
    assert broken == []
