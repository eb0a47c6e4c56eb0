#!/usr/bin/env python3
"""Counts the rows of `duplicates` that are outside tests, benches and examples.

A side is test code when its file is under a tests/, benches/, bench/ or
examples/ folder, is a test module of its own (`*_tests.rs`, `tests.rs`:
each is declared under `#[cfg(test)]`), is a file of pressure-core's
backend contract suite
(`src/contract/`, compiled only with the `contract` feature, which only the
backends' test builds turn on), or its lines stand after the file's
`#[cfg(test)]`. A pair
counts unless both sides are test code. Reads `duplicates --most 200` output on
stdin (run from the checkout root), prints the count and the counted rows.
"""
import re, sys

TESTY = re.compile(r'(^|/)(tests|benches|bench|examples)/|^crates/pressure-core/src/contract/|(^|/|_)tests\.rs$')

def test_from(path, cache={}):
    if path not in cache:
        line = None
        try:
            for i, l in enumerate(open(path), 1):
                if l.strip().startswith('#[cfg(test)]'):
                    line = i
                    break
        except OSError:
            pass
        cache[path] = line
    return cache[path]

def is_test(side):
    path, rng = side.rsplit(':', 1)
    if TESTY.search(path):
        return True
    start = int(rng.split('-')[0])
    t = test_from(path)
    return t is not None and start >= t

rows = []
for line in sys.stdin:
    m = re.match(r'^(D\d+) (\S+) ~ (\S+)', line)
    if m and not (is_test(m.group(2)) and is_test(m.group(3))):
        rows.append(line.rstrip())
print(len(rows), 'pairs outside tests, benches and examples')
for r in rows:
    print(r)
