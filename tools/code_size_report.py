#!/usr/bin/env python3
"""Prints the largest source files and functions of the tree (CI runs it on every build).

  tools/code_size_report.py [--top N] [--max-file-lines L]

Files: every tracked .cpp/.h/.cu/.cuh (git ls-files). Functions: a definition is a line ending in
`{` (or whose next line is a lone `{`) at namespace or class level that looks like a signature
(a name followed by a parameter list, not a control statement); its length runs to the matching
closing brace. A heuristic, good enough to see what grows. Exits 1 when a file other than a
generated table exceeds --max-file-lines (the house rule: 800).
"""
import os
import re
import subprocess
import sys

GENERATED = {"coordinator/tokenizer/nfc_tables.cpp"}
CONTROL = re.compile(r"^\s*(if|for|while|switch|catch|do|else|return|namespace|struct|class|enum|union)\b")
SIGNATURE = re.compile(r"[A-Za-z_~][A-Za-z0-9_:<>~]*\s*\([^;]*\)\s*(const)?\s*(noexcept)?\s*(override)?\s*(->[^{]*)?\s*(:.*)?\{?\s*$")


LITERALS = re.compile(r'R"\((?:.|\n)*?\)"|"(?:\\.|[^"\\])*"|\'(?:\\.|[^\'\\])\'|//[^\n]*')


def functions(path, text):
    """(length, place, name) of every definition; literals and comments do not count as braces."""
    lines = LITERALS.sub(lambda m: "\n" * m.group(0).count("\n") or '""', text).split("\n")
    out = []
    i = 0
    while i < len(lines):
        line = lines[i]
        opens = line.rstrip().endswith("{") or (i + 1 < len(lines) and lines[i + 1].strip() == "{")
        indent = len(line) - len(line.lstrip())
        if opens and indent <= 2 and not CONTROL.match(line) and SIGNATURE.search(line.split("//")[0]):
            start = i
            depth = 0
            j = i
            while j < len(lines):
                depth += lines[j].count("{") - lines[j].count("}")
                if depth <= 0 and "{" in "".join(lines[start:j + 1]):
                    break
                j += 1
            name = re.search(r"([A-Za-z_~][A-Za-z0-9_:~]*)\s*\(", line)
            out.append((j - start + 1, f"{path}:{start + 1}", name.group(1) if name else "?"))
            i = j + 1
            continue
        i += 1
    return out


def main():
    top = 10
    max_lines = 800
    args = sys.argv[1:]
    if "--top" in args:
        top = int(args[args.index("--top") + 1])
    if "--max-file-lines" in args:
        max_lines = int(args[args.index("--max-file-lines") + 1])
    files = subprocess.run(["git", "ls-files", "*.cpp", "*.h", "*.cu", "*.cuh"], capture_output=True, text=True,
                           check=True).stdout.split()
    sizes, funcs = [], []
    for f in files:
        if not os.path.exists(f):  # deleted in the working tree
            continue
        with open(f, encoding="utf-8", errors="replace") as fh:
            text = fh.read()
        sizes.append((text.count("\n"), f))
        funcs += functions(f, text)
    sizes.sort(reverse=True)
    funcs.sort(reverse=True)
    print(f"largest files (of {len(files)}):")
    for n, f in sizes[:top]:
        print(f"  {n:5d}  {f}")
    print("largest functions:")
    for n, where, name in funcs[:top]:
        print(f"  {n:5d}  {name}  {where}")
    over = [(n, f) for n, f in sizes if n > max_lines and f not in GENERATED]
    for n, f in over:
        print(f"error: {f} has {n} lines (at most {max_lines})")
    return 1 if over else 0


if __name__ == "__main__":
    sys.exit(main())
