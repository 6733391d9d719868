#!/usr/bin/env python3
"""subset-same.py KIND A B: exit 0 when every value file A holds is in file B
unchanged — B may add columns (CSV), keys (JSON objects, JSONL rows, Parquet
rows as JSON) or entries to a list of named objects (a manifest's
command-line options: a new flag) but must have the same rows in the same
order — and print the added column/key names; exit 1 with the first difference otherwise.
KIND: csv, json (one document; Parquet's rows+metadata as read_parquet.mjs
prints them) or jsonl. Used by identical-tables.sh to tell a table whose
schema grew (new columns of another issue) from one whose numbers moved."""
import csv, json, sys

kind, pa, pb = sys.argv[1:4]
added = set()


def named(xs):
    """xs is a non-empty list of objects that each have a distinct "name"."""
    return bool(xs) and all(isinstance(x, dict) and "name" in x for x in xs) and len({x["name"] for x in xs}) == len(xs)


def sub(a, b, where):
    """a's content is in b (dicts: a's keys with equal values)."""
    if isinstance(a, dict) and isinstance(b, dict):
        for k, v in a.items():
            if k not in b:
                sys.exit(f"{where}: key {k!r} missing in B")
            sub(v, b[k], f"{where}.{k}")
        added.update(k for k in b if k not in a)
    elif isinstance(a, list) and isinstance(b, list) and named(a) and named(b):
        # a list of named entries (a manifest's command-line options) is a
        # map by name: B may add entries (a new flag), A's must be in B
        # unchanged, in A's order
        nb = {x["name"]: x for x in b}
        for x in a:
            if x["name"] not in nb:
                sys.exit(f"{where}: entry {x['name']!r} missing in B")
            sub(x, nb[x["name"]], f"{where}[{x['name']}]")
        names = [x["name"] for x in b if x["name"] in {y["name"] for y in a}]
        if names != [x["name"] for x in a]:
            sys.exit(f"{where}: entries in another order in B")
        added.update(f"{where}[{x['name']}]" for x in b if x["name"] not in {y["name"] for y in a})
    elif isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            sys.exit(f"{where}: {len(a)} items in A, {len(b)} in B")
        for i, (x, y) in enumerate(zip(a, b)):
            sub(x, y, f"{where}[{i}]")
    elif a != b:
        sys.exit(f"{where}: {a!r} in A, {b!r} in B")


if kind == "csv":
    ra, rb = list(csv.DictReader(open(pa))), list(csv.DictReader(open(pb)))
    sub(ra, rb, "rows")
elif kind == "jsonl":
    sub([json.loads(l) for l in open(pa)], [json.loads(l) for l in open(pb)], "rows")
else:
    sub(json.load(open(pa)), json.load(open(pb)), "doc")
print(", ".join(sorted(added)))
