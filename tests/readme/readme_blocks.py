#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Run README.md's command blocks as a reader would type them.

Every fenced shell block (```sh, ```bash, ```shell) must be preceded by a
marker comment naming where it is tested:

    <!-- readme-test: host vm -->
    ```sh
    ...
    ```

  host   runs on the build machine (no LIO), in a scratch directory: the
         tests/readme ctest entries (cowctl from the build on PATH, pools in
         the scratch directory through COWSTORE_POOL_DIR)
  vm     runs as root inside the e2e VM (tests/e2e/suites/readme.sh), on
         Debian's kernel with LIO, in the order of the file
  check  too big to run inside a test (the build, CI itself): its shell syntax
         is checked and every command it names must exist (a script of this
         checkout, or a program on PATH; a cmake/ctest --preset must be one
         CMakePresets.json defines). Text after "check" says why.

An unmarked block, or a marker with an unknown word, fails `lint`. `run`
runs every block of a mode, each in one `bash -eo pipefail` (so any command
that fails fails the block, and with it the test), and names the README line
of the command that failed.

usage: readme_blocks.py lint README
       readme_blocks.py list README [--mode MODE]
       readme_blocks.py run README --mode host|vm [--cwd DIR] [--log DIR] [--start-at REGEX]
       readme_blocks.py check README --repo DIR
"""
import argparse
import json
import os
import re
import shlex
import shutil
import subprocess
import sys

MODES = ("host", "vm", "check")
SHELL_LANGS = ("sh", "bash", "shell", "console")
MARKER = re.compile(r"^<!--\s*readme-test:\s*(.*?)\s*-->\s*$")
FENCE = re.compile(r"^(\s*)(```+|~~~+)\s*([^\s`]*)")


class Block:
    def __init__(self, line, lang, modes, why, text):
        self.line = line          # README line of the first command (1-based)
        self.lang = lang
        self.modes = modes
        self.why = why
        self.text = text


def parse(path):
    """Returns (blocks, problems)."""
    lines = open(path, encoding="utf-8").read().split("\n")
    blocks, problems = [], []
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        fence, lang, start = m.group(2), m.group(3).lower(), i
        j = i + 1
        while j < len(lines) and not lines[j].strip().startswith(fence[0] * len(fence)):
            j += 1
        if j >= len(lines):
            problems.append(f"{path}:{start + 1}: code block never closed")
            break
        body = "\n".join(lines[start + 1:j]) + "\n"
        if lang in SHELL_LANGS:
            k = start - 1
            while k >= 0 and not lines[k].strip():
                k -= 1
            mm = MARKER.match(lines[k].strip()) if k >= 0 else None
            if not mm:
                problems.append(f"{path}:{start + 1}: shell block without a '<!-- readme-test: host|vm|check -->' "
                                "line before it (say where it is tested)")
            else:
                words = mm.group(1).split()
                modes, why = [], ""
                for n, w in enumerate(words):
                    if w in MODES:
                        modes.append(w)
                    elif "check" in modes:
                        why = " ".join(words[n:])
                        break
                    else:
                        problems.append(f"{path}:{k + 1}: unknown readme-test mode '{w}' (have: {', '.join(MODES)})")
                        break
                if not modes:
                    problems.append(f"{path}:{k + 1}: readme-test marker names no mode")
                if "check" in modes and len(modes) > 1:
                    problems.append(f"{path}:{k + 1}: 'check' is for blocks that are not run; do not mix it")
                blocks.append(Block(start + 2, lang, modes, why, body))
        i = j + 1
    return blocks, problems


def lint(path):
    blocks, problems = parse(path)
    for mode in ("host", "vm"):
        if not any(mode in b.modes for b in blocks):
            problems.append(f"{path}: no block is marked '{mode}' (the quick start must be run somewhere)")
    for p in problems:
        print(p, file=sys.stderr)
    if not problems:
        print(f"{path}: {len(blocks)} shell blocks, all marked: " +
              ", ".join(f"line {b.line} {'+'.join(b.modes)}" for b in blocks))
    return 1 if problems else 0


# The runner's prologue: stop at the first failing command, say which README
# line it was (the block's own line numbers shifted to the README's).
PROLOGUE = r"""set -eo pipefail
trap 'rc=$?; echo "README.md:$(( {first} + LINENO - {shift} )): this command failed (exit $rc): $BASH_COMMAND" >&2' ERR
"""


def run(path, mode, cwd, logdir, start_at=None):
    blocks, problems = parse(path)
    if problems:
        for p in problems:
            print(p, file=sys.stderr)
        return 1
    todo = [b for b in blocks if mode in b.modes]
    if start_at:
        first = next((n for n, b in enumerate(todo) if re.search(start_at, b.text)), None)
        if first is None:
            print(f"{path}: no '{mode}' block matches --start-at {start_at}", file=sys.stderr)
            return 1
        todo = todo[first:]
    if not todo:
        print(f"{path}: no block marked '{mode}'", file=sys.stderr)
        return 1
    if logdir:
        os.makedirs(logdir, exist_ok=True)
    for n, b in enumerate(todo, 1):
        prologue = PROLOGUE.replace("{first}", str(b.line)).replace("{shift}", str(PROLOGUE.count("\n") + 1))
        script = prologue + b.text
        print(f"--- README.md line {b.line}: block {n}/{len(todo)} ({mode})", flush=True)
        for ln in b.text.rstrip("\n").split("\n"):
            print(f"    $ {ln}", flush=True)
        r = subprocess.run(["bash", "-c", script, f"README.md:{b.line}"], cwd=cwd,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        sys.stdout.write(r.stdout)
        if logdir:
            with open(os.path.join(logdir, f"block-{b.line}.log"), "w") as f:
                f.write(script + "\n# ---- output\n" + r.stdout + f"# ---- exit {r.returncode}\n")
        if r.returncode != 0:
            print(f"FAILED: README.md block at line {b.line} ({mode}) exits {r.returncode}", flush=True)
            return 1
    print(f"{len(todo)} README blocks ({mode}) ran", flush=True)
    return 0


def simple_commands(text):
    """The commands of a block: (README line offset, argv), one per simple command."""
    out = []
    for off, ln in enumerate(text.split("\n")):
        lex = shlex.shlex(ln, posix=True, punctuation_chars=True)
        lex.whitespace_split = True
        lex.commenters = "#"
        cur = []
        try:
            toks = list(lex)
        except ValueError:
            toks = []
        for t in toks:
            if t in ("&&", "||", ";", "|", "&", "(", ")"):
                if cur:
                    out.append((off, cur))
                cur = []
            else:
                cur.append(t)
        if cur:
            out.append((off, cur))
    return out


def presets(repo, kind):
    try:
        data = json.load(open(os.path.join(repo, "CMakePresets.json")))
    except OSError:
        return set()
    return {p["name"] for p in data.get(kind, [])}


def check(path, repo):
    blocks, problems = parse(path)
    todo = [b for b in blocks if "check" in b.modes]
    for b in todo:
        r = subprocess.run(["bash", "-n"], input=b.text, text=True, capture_output=True)
        if r.returncode != 0:
            problems.append(f"README.md:{b.line}: shell syntax: {r.stderr.strip()}")
        for off, argv in simple_commands(b.text):
            where = f"README.md:{b.line + off}"
            while argv and re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", argv[0]):
                argv = argv[1:]
            if not argv:
                continue
            prog = argv[0]
            if "/" in prog:
                f = os.path.join(repo, prog)
                if not (os.path.isfile(f) and os.access(f, os.X_OK)):
                    problems.append(f"{where}: {prog} is not an executable script of this checkout")
            elif not shutil.which(prog):
                problems.append(f"{where}: {prog}: no such program on PATH")
            if prog in ("cmake", "ctest") and "--preset" in argv:
                name = argv[argv.index("--preset") + 1] if argv.index("--preset") + 1 < len(argv) else ""
                kind = ("buildPresets" if "--build" in argv else "configurePresets") if prog == "cmake" else "testPresets"
                if name not in presets(repo, kind):
                    problems.append(f"{where}: {prog} --preset {name}: CMakePresets.json has no such {kind[:-7]} preset")
            if prog.endswith("install-deps.sh") and len(argv) > 1:
                src = open(os.path.join(repo, prog)).read() if os.path.isfile(os.path.join(repo, prog)) else ""
                if not re.search(r"^\s*" + re.escape(argv[1]) + r"[|)]", src, re.M):
                    problems.append(f"{where}: {prog} has no mode '{argv[1]}'")
        print(f"checked README.md line {b.line} ({b.why or 'check'}): "
              f"{', '.join(' '.join(a[:3]) for _, a in simple_commands(b.text))}")
    for p in problems:
        print(p, file=sys.stderr)
    return 1 if problems else 0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("action", choices=("lint", "list", "run", "check"))
    ap.add_argument("readme")
    ap.add_argument("--mode", choices=MODES)
    ap.add_argument("--cwd", default=".")
    ap.add_argument("--log")
    ap.add_argument("--start-at", help="run: begin at the first block matching this regex")
    ap.add_argument("--repo", default=".")
    a = ap.parse_args()
    if a.action == "lint":
        return lint(a.readme)
    if a.action == "list":
        blocks, problems = parse(a.readme)
        for b in blocks:
            if a.mode is None or a.mode in b.modes:
                print(f"# README.md line {b.line}: {' '.join(b.modes)} {b.why}".rstrip())
                sys.stdout.write(b.text)
        return 1 if problems else 0
    if a.action == "check":
        return check(a.readme, a.repo)
    if a.mode not in ("host", "vm"):
        ap.error("run needs --mode host or --mode vm")
    return run(a.readme, a.mode, a.cwd, a.log, a.start_at)


if __name__ == "__main__":
    sys.exit(main())
