#!/usr/bin/python3
"""corpus.py - assemble the training corpus of the demo model from files a Debian machine has.

Sources (needs: apt-get install bible-kjv bible-kjv-text man-db groff-base; python3.11 stdlib):
  bible   the King James Bible, `bible Ge1:1-Re22:21` (one verse a line, "Ge1:1 In the ...");
          one document per chapter
  python  /usr/lib/python3.11/*.py (top level, sorted), whole files, up to --python-bytes
  c       /usr/include/*.h (top level, sorted), whole files, up to --c-bytes
  man     section-1 man pages of a fixed list of common tools, rendered to plain text with
          `man -l` (MANWIDTH=80, no hyphenation/justification, overstrikes removed)

Sources other than the Bible are cut into ~2 kB documents at line boundaries; document i of every source goes to the held-out set when i % 20 == 19
(5 %), to train otherwise.  Output (OUT_DIR): train.txt and heldout.txt, documents separated by
the line "<|endoftext|>"; manifest.json with per-source document counts and byte sizes.
The result depends only on the installed package versions (recorded in the manifest).
"""
import argparse
import glob
import json
import os
import re
import subprocess

SEP = "\n<|endoftext|>\n"
MAN_PAGES = ["ls", "cp", "mv", "rm", "mkdir", "chmod", "cat", "head", "tail", "sort", "diff", "grep",
             "sed", "find", "tar", "make", "awk", "ssh", "curl", "git", "python3"]
HELDOUT_EVERY = 20


def pkg_version(pkg):
    r = subprocess.run(["dpkg-query", "-W", "-f=${Version}", pkg], capture_output=True, text=True)
    return r.stdout.strip() if r.returncode == 0 else None


def bible_docs():
    """One document per chapter: "Genesis 1" then one line per verse ("  1 In the beginning ...")."""
    text = subprocess.run(["bible", "-l1000", "Ge1:1-Re22:21"], capture_output=True, text=True,
                          check=True).stdout
    docs, cur = [], []
    for line in text.splitlines():
        if re.match(r"^\S.* \d+$", line) and cur:       # a chapter heading starts a new document
            docs.append("\n".join(cur).strip("\n"))
            cur = []
        if line.strip():
            cur.append(line.rstrip())
    if cur:
        docs.append("\n".join(cur).strip("\n"))
    return docs


def blocks(texts, size=2000):
    """Cut texts into documents of about `size` bytes at line boundaries (balances the held-out split)."""
    out = []
    for t in texts:
        cur, n = [], 0
        for line in t.split("\n"):
            cur.append(line)
            n += len(line) + 1
            if n >= size:
                out.append("\n".join(cur).strip("\n"))
                cur, n = [], 0
        if cur and "\n".join(cur).strip():
            out.append("\n".join(cur).strip("\n"))
    return [d for d in out if d]


def file_docs(pattern, cap):
    docs, total = [], 0
    for path in sorted(glob.glob(pattern)):
        try:
            with open(path, encoding="utf-8") as f:
                t = f.read()
        except (UnicodeDecodeError, OSError):
            continue
        t = t.strip("\n")
        if not t:
            continue
        if total + len(t.encode()) > cap:
            break
        docs.append(t)
        total += len(t.encode())
    return docs


def man_docs():
    docs = []
    env = dict(os.environ, MANWIDTH="80", MAN_KEEP_FORMATTING="0", LC_ALL="C.UTF-8")
    for name in MAN_PAGES:
        path = f"/usr/share/man/man1/{name}.1.gz"
        if not os.path.exists(path):
            continue
        r = subprocess.run(["man", "--nh", "--nj", "-l", path], capture_output=True, text=True, env=env)
        if r.returncode != 0:
            continue
        t = re.sub(r".\x08", "", r.stdout)          # overstrike bold/underline
        t = re.sub(r"\n{3,}", "\n\n", t).strip("\n")
        if t:
            docs.append(t)
    return docs


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out_dir")
    ap.add_argument("--python-bytes", type=int, default=1_000_000)
    ap.add_argument("--c-bytes", type=int, default=500_000)
    a = ap.parse_args(argv)
    os.makedirs(a.out_dir, exist_ok=True)
    sources = [("bible", bible_docs()),
               ("python", blocks(file_docs("/usr/lib/python3.11/*.py", a.python_bytes))),
               ("c", blocks(file_docs("/usr/include/*.h", a.c_bytes))),
               ("man", blocks(man_docs()))]
    train, held, manifest = [], [], {"sources": {}, "heldout_rule": f"document i % {HELDOUT_EVERY} == {HELDOUT_EVERY - 1}",
                                     "packages": {p: pkg_version(p) for p in
                                                  ["bible-kjv", "bible-kjv-text", "libpython3.11-stdlib",
                                                   "libc6-dev", "man-db", "groff-base"]}}
    for name, docs in sources:
        tr = [d for i, d in enumerate(docs) if i % HELDOUT_EVERY != HELDOUT_EVERY - 1]
        he = [d for i, d in enumerate(docs) if i % HELDOUT_EVERY == HELDOUT_EVERY - 1]
        train += tr
        held += he
        manifest["sources"][name] = {"docs": len(docs), "train_bytes": sum(len(d.encode()) for d in tr),
                                     "heldout_bytes": sum(len(d.encode()) for d in he)}
    # interleave sources deterministically in the training file: sort by a fixed hash of the text
    # would be nicer for SGD, but the trainer samples random windows anyway, so order is irrelevant.
    for fn, docs in (("train.txt", train), ("heldout.txt", held)):
        with open(os.path.join(a.out_dir, fn), "w", encoding="utf-8") as f:
            f.write(SEP.join(docs) + "\n")
    manifest["train_bytes"] = os.path.getsize(os.path.join(a.out_dir, "train.txt"))
    manifest["heldout_bytes"] = os.path.getsize(os.path.join(a.out_dir, "heldout.txt"))
    with open(os.path.join(a.out_dir, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=2, sort_keys=True)
    print(json.dumps(manifest, indent=2, sort_keys=True))


if __name__ == "__main__":
    main()
