#!/usr/bin/env python3
"""Checks the documentation's links: README.md and docs/*.md.

  scripts/check_links.py [REPO_ROOT]     check the tree (default: this script's repository)
  scripts/check_links.py --self-test     check the checker on made-up documents

Fails (exit 1), listing FILE:LINE and the link, when
  - a relative link names a file or folder that does not exist, or leaves the repository;
  - a link's #anchor matches no heading (GitHub's slugs) or explicit anchor of the target
    Markdown file (for other files only GitHub's line anchors, #L10 or #L10-L20, are allowed);
  - an http(s) link is malformed (no network here: its target is not fetched);
  - a link uses another scheme or an absolute path (they break outside GitHub);
  - README.md is longer than MAX_README_LINES lines (the README is the front door).
Links inside fenced code blocks and inline code are not links. Python standard library only.
"""

import os
import re
import sys
import tempfile
import unittest
import urllib.parse

MAX_README_LINES = 150

FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
ATX_HEADING = re.compile(r"^ {0,3}(#{1,6})[ \t]+(.*?)[ \t]*#*[ \t]*$")
SETEXT_UNDERLINE = re.compile(r"^ {0,3}(=+|-+)[ \t]*$")
HTML_ANCHOR = re.compile(r"""<a\s[^>]*\b(?:name|id)\s*=\s*["']([^"']+)["']""", re.IGNORECASE)
INLINE_CODE = re.compile(r"(`+)(.+?)\1")
# [text](target) or ![alt](target), with an optional "title"; text may hold one level of [].
INLINE_LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]*)>?(?:\s+\"[^\"]*\")?\s*\)")
REFERENCE_DEF = re.compile(r"^ {0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+.*)?$")
LINE_ANCHOR = re.compile(r"^L\d+(?:-L\d+)?$")


def github_slug(text):
    """The anchor GitHub gives a heading: its text without markup, lower case, punctuation
    other than '-' and '_' dropped, spaces as '-'."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", text)  # links and images: their text
    text = re.sub(r"<[^>]+>", "", text)  # inline HTML tags
    text = text.replace("`", "").replace("*", "")
    text = text.strip().lower()
    text = "".join(c for c in text if c.isalnum() or c in " -_")
    return text.replace(" ", "-")


def code_free_lines(text):
    """Yields (line number, line) outside fenced code blocks, inline code blanked out."""
    fence = None
    for number, line in enumerate(text.splitlines(), start=1):
        m = FENCE.match(line)
        if fence is not None:
            if m and m.group(1)[0] == fence[0] and len(m.group(1)) >= len(fence):
                fence = None
            continue
        if m:
            fence = m.group(1)
            continue
        yield number, INLINE_CODE.sub(lambda c: " " * len(c.group(0)), line)


def anchors_of(text):
    """Every anchor a Markdown document defines: heading slugs (repeats numbered -1, -2, ...
    as GitHub does) and explicit <a name=...>/<a id=...>."""
    anchors = set()
    seen = {}
    previous = None
    for _, line in code_free_lines(text):
        heading = None
        m = ATX_HEADING.match(line)
        if m:
            heading = m.group(2)
        elif previous is not None and previous.strip() and SETEXT_UNDERLINE.match(line) \
                and not ATX_HEADING.match(previous):
            heading = previous.strip()
        if heading is not None:
            slug = github_slug(heading)
            count = seen.get(slug, 0)
            seen[slug] = count + 1
            anchors.add(slug if count == 0 else "%s-%d" % (slug, count))
        anchors.update(a for a in HTML_ANCHOR.findall(line))
        previous = line
    return anchors


def links_of(text):
    """(line number, target) of every inline link, image and reference definition."""
    for number, line in code_free_lines(text):
        m = REFERENCE_DEF.match(line)
        if m:
            yield number, m.group(1)
            continue
        for m in INLINE_LINK.finditer(line):
            yield number, m.group(1)


def check_external(target):
    """Why an http(s) URL is malformed, or None: a host name with a dot, a valid port, no
    white space."""
    try:
        parsed = urllib.parse.urlsplit(target)
        host = parsed.hostname
        parsed.port  # ValueError when the port is not a number in range
    except ValueError:
        return "malformed URL"
    if not host or "." not in host or any(c.isspace() for c in target):
        return "malformed URL"
    return None


def check_file(root, path, anchor_cache):
    """Problems with the links of one Markdown file, as 'FILE:LINE: message' strings."""
    problems = []
    with open(path, encoding="utf-8") as f:
        text = f.read()
    rel = os.path.relpath(path, root)
    for number, target in links_of(text):
        where = "%s:%d: %s" % (rel, number, target)
        if not target:
            problems.append(where + ": empty link")
            continue
        scheme = urllib.parse.urlsplit(target).scheme
        if scheme in ("http", "https"):
            error = check_external(target)
            if error:
                problems.append("%s: %s" % (where, error))
            continue
        if scheme or target.startswith("/"):
            problems.append(where + ": not a relative link or an http(s) URL")
            continue
        file_part, _, anchor = target.partition("#")
        file_part = urllib.parse.unquote(file_part)
        resolved = os.path.normpath(os.path.join(os.path.dirname(path), file_part)) \
            if file_part else path
        if os.path.relpath(resolved, root).startswith(".."):
            problems.append(where + ": leaves the repository")
            continue
        if not os.path.exists(resolved):
            problems.append(where + ": no such file " + os.path.relpath(resolved, root))
            continue
        if not anchor:
            continue
        if resolved.endswith(".md") and os.path.isfile(resolved):
            if resolved not in anchor_cache:
                with open(resolved, encoding="utf-8") as f:
                    anchor_cache[resolved] = anchors_of(f.read())
            if anchor not in anchor_cache[resolved]:
                problems.append("%s: no heading #%s in %s" %
                                (where, anchor, os.path.relpath(resolved, root)))
        elif not LINE_ANCHOR.match(anchor):
            problems.append("%s: #%s is not a line anchor (#L10, #L10-L20)" % (where, anchor))
    return problems


def documents(root):
    docs_dir = os.path.join(root, "docs")
    names = sorted(n for n in os.listdir(docs_dir) if n.endswith(".md")) \
        if os.path.isdir(docs_dir) else []
    return [os.path.join(root, "README.md")] + [os.path.join(docs_dir, n) for n in names]


def check_tree(root):
    """Every problem in the tree at `root`, as printable strings (empty when all is well)."""
    problems = []
    readme = os.path.join(root, "README.md")
    if not os.path.isfile(readme):
        return ["README.md: missing"]
    with open(readme, encoding="utf-8") as f:
        lines = len(f.read().splitlines())
    if lines > MAX_README_LINES:
        problems.append("README.md: %d lines, at most %d" % (lines, MAX_README_LINES))
    anchor_cache = {}
    for path in documents(root):
        problems += check_file(root, path, anchor_cache)
    return problems


class CheckerTest(unittest.TestCase):
    """The checker finds what it should on made-up trees (a checker that finds nothing would
    pass any tree)."""

    def make_tree(self, files):
        tmp = tempfile.TemporaryDirectory()
        self.addCleanup(tmp.cleanup)
        for name, body in files.items():
            path = os.path.join(tmp.name, name)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "w", encoding="utf-8") as f:
                f.write(body)
        return tmp.name

    def test_slugs_follow_github(self):
        self.assertEqual(github_slug("Exactly-once updates"), "exactly-once-updates")
        self.assertEqual(github_slug("`--max_to_keep` and `ckpt_inspect.py`"),
                         "--max_to_keep-and-ckpt_inspectpy")
        self.assertEqual(github_slug("What holds (tested, with SIGKILL)"),
                         "what-holds-tested-with-sigkill")
        self.assertEqual(github_slug("Processes: **roles** & [flags](x.md)"),
                         "processes-roles--flags")
        self.assertEqual(anchors_of("# A\n## A\nB\n---\n```\n# not a heading\n```\n"),
                         {"a", "a-1", "b"})

    def test_a_clean_tree_passes(self):
        root = self.make_tree({
            "README.md": "# Top\n[ops](docs/ops.md#the-flags) [self](#top) [code](src/a.cc#L3)\n"
                         "[web](https://example.org/x?y=1) ![pic](docs/p.png)\n"
                         "`[not](a-link.md)`\n```\n[nor](this.md)\n```\n[ref]: docs/ops.md\n",
            "docs/ops.md": "# Ops\n## The flags\n[back](../README.md#top)\n",
            "docs/p.png": "",
            "src/a.cc": "",
        })
        self.assertEqual(check_tree(root), [])

    def test_every_kind_of_broken_link_is_listed(self):
        root = self.make_tree({
            "README.md": "# Top\n[a](docs/missing.md)\n[b](docs/ops.md#no-such-heading)\n"
                         "[c](#nowhere)\n[d](https://)\n[e](ftp://example.org)\n"
                         "[f](../outside.md)\n[g](src/a.cc#main)\n[h]()\n[i]: docs/gone.md\n",
            "docs/ops.md": "# Ops\n",
            "src/a.cc": "",
        })
        problems = check_tree(root)
        for needle in ("README.md:2: docs/missing.md: no such file",
                       "README.md:3: docs/ops.md#no-such-heading: no heading",
                       "README.md:4: #nowhere: no heading",
                       "README.md:5: https://: malformed URL",
                       "README.md:6: ftp://example.org: not a relative link",
                       "README.md:7: ../outside.md: leaves the repository",
                       "README.md:8: src/a.cc#main: #main is not a line anchor",
                       "README.md:9: : empty link",
                       "README.md:10: docs/gone.md: no such file"):
            self.assertTrue(any(p.startswith(needle) for p in problems),
                            "%r not in %r" % (needle, problems))
        self.assertEqual(len(problems), 9, problems)

    def test_long_readme_fails(self):
        root = self.make_tree({"README.md": "line\n" * (MAX_README_LINES + 1)})
        self.assertEqual(check_tree(root),
                         ["README.md: %d lines, at most %d" % (MAX_README_LINES + 1,
                                                               MAX_README_LINES)])


def main(argv):
    if argv[1:] == ["--self-test"]:
        suite = unittest.defaultTestLoader.loadTestsFromTestCase(CheckerTest)
        return 0 if unittest.TextTestRunner(verbosity=2).run(suite).wasSuccessful() else 1
    if len(argv) > 2 or (len(argv) == 2 and argv[1].startswith("-")):
        print(__doc__.strip(), file=sys.stderr)
        return 2
    root = os.path.abspath(argv[1] if len(argv) == 2 else
                           os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    problems = check_tree(root)
    for problem in problems:
        print(problem)
    checked = len(documents(root))
    if problems:
        print("%d broken link(s) or limit(s) in %d document(s)" % (len(problems), checked))
        return 1
    print("ok: every link in %d document(s) resolves; README.md within %d lines" %
          (checked, MAX_README_LINES))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
