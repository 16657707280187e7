#!/usr/bin/python3
"""Checks that every C++, C and Fortran code sample in README.md and docs/*.md is a file
that the build compiles and a test runs.

Every fenced block whose language is cpp (c++, cxx), c or fortran (f90) must start with a
marker comment naming that file, relative to the repository root:

    // sample: examples/cpp/readme_tp_mlp.cpp              (C++)
    /* sample: examples/c/readme_halo.c */                 (C)
    ! sample: examples/fortran/readme_halo.f90             (Fortran)

Without a suffix the rest of the block must be the whole file, byte for byte. With the
suffix ` (excerpt)` it must be a contiguous run of the file's lines; the run may be
indented more deeply in the file than in the block (one common prefix of whitespace),
so a fragment can sit inside a function. A document that cannot carry markers may be
mapped instead (--unmarked DOC=FILE): each of its unmarked blocks must then be an
excerpt of FILE.

Every file named this way must be one of the sources that examples/CMakeLists.txt
compiles and runs under a test (--built, the global property TESSERA_DOC_SAMPLE_SOURCES),
and every such source must be named by at least one block. --unbuilt-lang fortran relaxes
the first rule for Fortran samples in a build without a Fortran compiler (their text is
still checked).

So an edit to a sample in a document without the same edit to its file, an edit to a
file's sample lines without the same edit to the document, and a sample file that no
document shows any more all fail this check.

    check_doc_samples.py --root REPO [--built examples/cpp/x.cpp ...]
                         [--unbuilt-lang fortran] [--unmarked docs/a.md=examples/cpp/a.cpp]
    check_doc_samples.py --root REPO --self-test [the same options]

--self-test runs the check on the tree (it must pass) and then on copies of the tree
with one sample edited in each of several ways (each must fail).
"""

import argparse
import difflib
import glob
import os
import re
import shutil
import sys
import tempfile

LANGS = {
    "cpp": "cpp", "c++": "cpp", "cxx": "cpp", "cc": "cpp",
    "c": "c",
    "fortran": "fortran", "f90": "fortran", "f95": "fortran", "f03": "fortran", "f08": "fortran",
}
EXTENSIONS = {
    "cpp": (".cpp", ".cc", ".cxx", ".hpp", ".h"),
    "c": (".c", ".h"),
    "fortran": (".f90", ".F90", ".f", ".F"),
}
FENCE = re.compile(r"^(\s*)(`{3,}|~{3,})\s*([A-Za-z0-9_+-]*)")
MARKER = re.compile(r"^\s*(?://|/\*|!)\s*sample:\s*(\S+)(\s+\(excerpt\))?\s*(?:\*/)?\s*$")


class Block:
    def __init__(self, doc, line, lang, lines):
        self.doc, self.line, self.lang, self.lines = doc, line, lang, lines

    def where(self):
        return f"{self.doc}:{self.line}"


def documents(root):
    docs = ["README.md"] if os.path.exists(os.path.join(root, "README.md")) else []
    docs += sorted(os.path.relpath(p, root) for p in glob.glob(os.path.join(root, "docs", "*.md")))
    return docs


def blocks_of(root, doc):
    """The fenced code blocks of a Markdown file whose language is C++, C or Fortran."""
    lines = read_text(os.path.join(root, doc)).split("\n")
    out, i = [], 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        indent, fence, lang = m.group(1), m.group(2), m.group(3).lower()
        j = i + 1
        while j < len(lines):
            close = lines[j].strip()
            if close.startswith(fence[0] * len(fence)) and close.strip(fence[0]) == "":
                break
            j += 1
        if lang in LANGS:
            body = [l[len(indent):] if l.startswith(indent) else l.lstrip() for l in lines[i + 1:j]]
            out.append(Block(doc, i + 1, LANGS[lang], body))
        i = j + 1
    return out


def read_text(path):
    with open(path, encoding="utf-8") as f:
        return f.read()


def strip_trailing_blank(lines):
    lines = list(lines)
    while lines and not lines[-1].strip():
        lines.pop()
    while lines and not lines[0].strip():
        lines.pop(0)
    return lines


def find_excerpt(file_lines, excerpt):
    """Index of the first line of `excerpt` in `file_lines` (with one common extra indent
    on its non-blank lines), or -1."""
    first = next(k for k, l in enumerate(excerpt) if l.strip())
    for start in range(0, len(file_lines) - len(excerpt) + 1):
        anchor = file_lines[start + first]
        if not anchor.endswith(excerpt[first]) or not anchor.strip():
            continue
        prefix = anchor[: len(anchor) - len(excerpt[first])]
        if prefix.strip():
            continue
        ok = True
        for k, want in enumerate(excerpt):
            got = file_lines[start + k]
            if not want.strip():
                if got.strip():
                    ok = False
                    break
            elif got != prefix + want:
                ok = False
                break
        if ok:
            return start
    return -1


def best_partial(file_lines, excerpt):
    """How many leading lines of the excerpt match somewhere (for the error message)."""
    best, where = 0, -1
    for n in range(len(excerpt), 0, -1):
        head = excerpt[:n]
        if not any(l.strip() for l in head):
            continue
        at = find_excerpt(file_lines, head)
        if at >= 0:
            return n, at
    return best, where


def check(root, built, unbuilt_langs, unmarked):
    errors, referenced, count = [], set(), 0
    built = set(built) if built is not None else None
    for doc in documents(root):
        for block in blocks_of(root, doc):
            count += 1
            body = strip_trailing_blank(block.lines)
            if not body:
                errors.append(f"{block.where()}: empty {block.lang} block")
                continue
            m = MARKER.match(body[0])
            if m:
                path, excerpt, body = m.group(1), bool(m.group(2)), strip_trailing_blank(body[1:])
            elif doc in unmarked:
                path, excerpt = unmarked[doc], True
            else:
                errors.append(
                    f"{block.where()}: this {block.lang} block has no sample marker; its first line must be "
                    f"a comment 'sample: <file>' (the whole file) or 'sample: <file> (excerpt)', naming a "
                    f"file that examples/CMakeLists.txt builds and runs")
                continue
            referenced.add(path)
            full = os.path.join(root, path)
            if not os.path.isfile(full):
                errors.append(f"{block.where()}: sample file {path} does not exist")
                continue
            if not path.endswith(EXTENSIONS[block.lang]):
                errors.append(f"{block.where()}: a {block.lang} block names {path}, which is not a {block.lang} file")
            if built is not None and path not in built and block.lang not in unbuilt_langs:
                errors.append(f"{block.where()}: {path} is not among the sources built and run as samples "
                              f"(tessera_add_doc_sample in examples/CMakeLists.txt)")
            text = read_text(full)
            file_lines = text.split("\n")
            if text.endswith("\n"):
                file_lines.pop()
            if not body:
                errors.append(f"{block.where()}: the block holds only its marker")
                continue
            if excerpt:
                if find_excerpt(file_lines, body) < 0:
                    n, at = best_partial(file_lines, body)
                    hint = (f"its first {n} line(s) match {path}:{at + 1}, line {n + 1} of the excerpt "
                            f"({body[n].strip()!r}) does not" if n else "not even its first line is there")
                    errors.append(f"{block.where()}: the excerpt is not in {path}: {hint}")
            elif body != file_lines:
                diff = "\n".join(difflib.unified_diff(file_lines, body, path, block.where(), lineterm="", n=1))
                errors.append(f"{block.where()}: the block differs from {path} (the whole file):\n{diff}")
    if built is not None:
        for path in sorted(built - referenced):
            errors.append(f"{path} is built and run as a documentation sample, but no block of README.md or "
                          f"docs/*.md names it")
    return count, errors


def parse_unmarked(items):
    out = {}
    for item in items or []:
        doc, _, path = item.partition("=")
        if not path:
            raise SystemExit(f"--unmarked wants DOC=FILE, got {item!r}")
        out[doc] = path
    return out


def self_test(root, built, unbuilt_langs, unmarked):
    count, errors = check(root, built, unbuilt_langs, unmarked)
    if errors:
        print("self-test: the tree itself fails the check:\n" + "\n".join(errors))
        return 1
    # Pick one whole-file block and one excerpt block of the tree to mutate.
    whole = excerpt = None
    for doc in documents(root):
        for block in blocks_of(root, doc):
            body = strip_trailing_blank(block.lines)
            m = MARKER.match(body[0]) if body else None
            if not m:
                continue
            if m.group(2) and excerpt is None:
                excerpt = (block, m.group(1), strip_trailing_blank(body[1:]))
            if not m.group(2) and whole is None:
                whole = (block, m.group(1), strip_trailing_blank(body[1:]))
    if whole is None or excerpt is None:
        print("self-test: needs at least one whole-file sample and one excerpt")
        return 1

    def mutate_line(text, old, new):
        assert old in text, old
        return text.replace(old, new, 1)

    cases = []
    for kind, (block, path, body) in (("whole-file", whole), ("excerpt", excerpt)):
        doc_text, file_text = read_text(os.path.join(root, block.doc)), read_text(os.path.join(root, path))
        line = next(l for l in body if len(l.strip()) > 8 and doc_text.count(l.strip()) == 1
                    and file_text.count(l.strip()) == 1)
        cases.append((f"{kind} sample edited in {block.doc} only", block.doc, line.strip(), line.strip() + " edited"))
        cases.append((f"{kind} sample edited in {path} only", path, line.strip(), line.strip() + " edited"))
        marker = strip_trailing_blank(block.lines)[0]
        cases.append((f"{kind} sample's marker removed in {block.doc}", block.doc, marker + "\n", ""))
    # Every file a block names, so that a copy of the tree checks like the tree.
    named = set(unmarked.values()) | set(built or [])
    for doc in documents(root):
        for block in blocks_of(root, doc):
            body = strip_trailing_blank(block.lines)
            m = MARKER.match(body[0]) if body else None
            if m:
                named.add(m.group(1))

    def copy_tree():
        tmp = tempfile.mkdtemp(prefix="doc_samples_")
        for rel in documents(root) + sorted(named):
            dst = os.path.join(tmp, rel)
            os.makedirs(os.path.dirname(dst), exist_ok=True)
            shutil.copyfile(os.path.join(root, rel), dst)
        return tmp

    tmp = copy_tree()
    try:
        _, errs = check(tmp, built, unbuilt_langs, unmarked)
    finally:
        shutil.rmtree(tmp)
    if errs:
        print("self-test: an unedited copy of the tree fails the check:\n" + "\n".join(errs))
        return 1
    failures = 0
    for what, target, old, new in cases:
        tmp = copy_tree()
        try:
            path = os.path.join(tmp, target)
            with open(path, "w", encoding="utf-8") as f:
                f.write(mutate_line(read_text(os.path.join(root, target)), old, new))
            _, errs = check(tmp, built, unbuilt_langs, unmarked)
            if errs:
                print(f"self-test: {what}: detected ({errs[0].splitlines()[0]})")
            else:
                print(f"self-test: {what}: NOT detected")
                failures += 1
        finally:
            shutil.rmtree(tmp)
    # A sample file that no document names any more.
    if built:
        _, errs = check(root, set(built) | {"examples/cpp/no_such_sample.cpp"}, unbuilt_langs, unmarked)
        if any("no_such_sample" in e for e in errs):
            print("self-test: a built sample that no document shows: detected")
        else:
            print("self-test: a built sample that no document shows: NOT detected")
            failures += 1
    total = len(cases) + (1 if built else 0)
    print(f"self-test: {total - failures} of {total} edits detected")
    return 1 if failures else 0


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--root", required=True)
    parser.add_argument("--built", nargs="*", default=None,
                        help="sources (relative to the root) that the build compiles and a test runs")
    parser.add_argument("--unbuilt-lang", action="append", default=[], choices=sorted(set(LANGS.values())))
    parser.add_argument("--unmarked", action="append", default=[], metavar="DOC=FILE")
    parser.add_argument("--self-test", action="store_true")
    args = parser.parse_args()
    root = os.path.abspath(args.root)
    built = set(args.built) if args.built is not None else None
    unmarked = parse_unmarked(args.unmarked)
    if args.self_test:
        return self_test(root, built, set(args.unbuilt_lang), unmarked)
    count, errors = check(root, built, set(args.unbuilt_lang), unmarked)
    if errors:
        print("\n\n".join(errors))
        print(f"\n{len(errors)} problem(s) in {count} C++/C/Fortran block(s) of README.md and docs/*.md")
        return 1
    print(f"{count} C++/C/Fortran block(s) of README.md and docs/*.md match their sample files "
          f"({len(built) if built is not None else 'unchecked'} built and run sample source(s))")
    return 0


if __name__ == "__main__":
    sys.exit(main())
