#!/usr/bin/env python3
"""Surface and structure counts for the pressure workspace.

pub items (pub / pub(crate)) per crate; import circles (strongly connected
components of `crate::` / `super::` references between the folders and
files that are siblings in one folder, at every depth: a circle between two
folders of a crate, or between two files of a folder); the gateway's floors
(no import from a lower floor to a higher one, FLOORS below); the longest
functions and the longest files (test code left out).

Run from the checkout root:
    python3 scripts/measure-surface.py [--circles] [--check]
--circles lists each circle and each import that runs up a floor; --check
exits 1 when there is any; --bounds also exits 1 on a file over
MAX_FILE_LINES or a function over MAX_FN_LINES outside tests (CI runs
--circles --bounds).
"""
import os, re, sys
from collections import defaultdict

ROOTS = sorted([os.path.join('crates', c) for c in os.listdir('crates')] +
               [os.path.join('bindings', b) for b in ('node', 'python')])

def files(root):
    src = os.path.join(root, 'src')
    for d, _, fs in os.walk(src):
        for f in fs:
            if f.endswith('.rs'):
                yield os.path.join(d, f)

def modpath(src, path):
    rel = os.path.relpath(path, src)[:-3].split(os.sep)
    if rel[-1] in ('mod', 'lib', 'main'):
        rel = rel[:-1]
    return tuple(rel)

def strip_tests(text):
    # drop #[cfg(test)] mod tests { ... } blocks roughly: from the attribute to EOF
    m = re.search(r'#\[cfg\(test\)\]\s*(?:pub(?:\([^)]*\))?\s+)?mod \w+\s*\{', text)
    return text[:m.start()] if m else text

# The gateway's floors, lowest first: a module may import from its own
# floor (without a circle) and from the floors below, never from above.
FLOORS = {
    'pressure-gateway': [
        ['settings', 'backend', 'resources', 'path'],
        ['http', 'metrics', 'denial_log', 'charged', 'permits', 'otel'],
        ['auth', 'access_log'],
        ['plan'],
        ['rejection'],
        ['layers'],
        ['openai', 'agents', 'answer', 'decisions', 'proxy_service', 'manual_queue'],
        ['admin'],
        ['gateway', 'rls', 'run', 'drain'],
    ],
}
MAX_FILE_LINES = 800
MAX_FN_LINES = 100

total_pub = total_crate = 0
violations = 0
longest_files = []
cycles_all = []
longest = []
for root in ROOTS:
    src = os.path.join(root, 'src')
    if not os.path.isdir(src):
        continue
    mods = {}
    for p in files(src if False else root):
        mods[modpath(src, p)] = p
    # `pub use x::{A, B}` at the crate root: `crate::A` is `x`'s.
    reexp = {}
    for lib in ('lib.rs', 'main.rs'):
        lp = os.path.join(src, lib)
        if os.path.exists(lp):
            lt = open(lp).read()
            for m in re.finditer(r'pub use (\w+(?:::\w+)*)::\{([^;]*)\};', lt, re.S):
                for a, b in re.findall(r'(\w+)(?:\s+as\s+(\w+))?', m.group(2)):
                    reexp[b or a] = tuple(m.group(1).split('::'))
            for m in re.finditer(r'pub use (\w+(?:::\w+)*)::(\w+)(?:\s+as\s+(\w+))?;', lt):
                reexp[m.group(3) or m.group(2)] = tuple(m.group(1).split('::'))
    sib = defaultdict(set)
    why = defaultdict(list)
    pub = crate = 0
    edges = defaultdict(set)
    for mp, p in mods.items():
        text = open(p).read()
        body = strip_tests(text)
        # comments (doc links too) are not imports
        body = '\n'.join('' if l.lstrip().startswith('//') else l for l in body.split('\n'))
        if p.endswith(('tests.rs',)) or '/tests/' in p:
            body = ''
        pub += len(re.findall(r'^\s*pub (?:async |const |unsafe )*(?:fn|struct|enum|trait|type|const|static|mod|use)\b', body, re.M))
        pub += len(re.findall(r'^\s*pub \w+\s*:', body, re.M))  # pub fields
        crate += len(re.findall(r'^\s*pub\((?:crate|super|in [^)]*)\)', body, re.M))
        # references to crate:: / super:: paths
        refs = set()
        for m in re.finditer(r'\bcrate((?:::\w+)+)', body):
            refs.add(tuple(m.group(1).strip(':').split('::')))
        for m in re.finditer(r'\buse crate::\{([^;]*)\};', body, re.S):
            for part in re.findall(r'(\w+(?:::\w+)*)', m.group(1)):
                refs.add(tuple(part.split('::')))
        for m in re.finditer(r'\bsuper((?:::\w+)+)', body):
            base = mp[:-1] if not p.endswith(('mod.rs', 'lib.rs')) else mp[:-1]
            refs.add(base + tuple(m.group(1).strip(':').split('::')))
        refs = {(reexp[r[0]] + r[1:] if r and r[0] in reexp and (r[0],) not in mods else r) for r in refs}
        for r in refs:
            # longest prefix that is a module file
            for n in range(len(r), 0, -1):
                if r[:n] in mods and r[:n] != mp:
                    target = r[:n]
                    edges[mp].add(target)
                    # the siblings this reference runs between
                    k = 0
                    while k < min(len(mp), len(target)) and mp[k] == target[k]:
                        k += 1
                    if k < len(mp) and k < len(target):
                        sib[mp[:k + 1]].add(target[:k + 1])
                        why[(mp[:k + 1], target[:k + 1])].append('::'.join(mp) + ' -> ' + '::'.join(target))
                    break
        if not (p.endswith('tests.rs') or '/tests/' in p):
            code = [l for l in body.split('\n') if l.strip()]
            longest_files.append((len(body.rstrip().split('\n')), os.path.relpath(p)))
        # function lengths
        lines = body.split('\n')
        for i, l in enumerate(lines):
            m = re.match(r'^(\s*)(?:pub(?:\([^)]*\))? )?(?:async )?(?:const )?fn (\w+)', l)
            if m and not l.rstrip().endswith(';'):
                ind = m.group(1)
                for j in range(i + 1, len(lines)):
                    if lines[j].startswith(ind + '}') and len(lines[j].rstrip()) == len(ind) + 1:
                        longest.append((j - i + 1, f'{os.path.relpath(p)}:{i+1} {m.group(2)}'))
                        break
    # SCCs (Tarjan)
    index = {}; low = {}; stack = []; on = set(); sccs = []; counter = [0]
    sys.setrecursionlimit(10000)
    def sc(v):
        index[v] = low[v] = counter[0]; counter[0] += 1; stack.append(v); on.add(v)
        for w in sib.get(v, ()):
            if w not in index:
                sc(w); low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop(); on.discard(w); comp.append(w)
                if w == v: break
            if len(comp) > 1: sccs.append(comp)
    for v in list(set(sib) | {w for s in sib.values() for w in s}):
        if v not in index: sc(v)
    # circles between files of one module: pairs a->b->a with same parent
    circles = set()
    for a in mods:
        for b in edges.get(a, ()):
            if a in edges.get(b, ()) and a < b:
                circles.add((a, b))
    name = os.path.basename(root)
    # imports that run up a floor
    up = []
    floors = FLOORS.get(name)
    if floors:
        level = {m: i for i, f in enumerate(floors) for m in f}
        tops = {m[0] for m in mods if m}
        unplaced = sorted(tops - set(level))
        for m in unplaced:
            up.append(f'{m}: a top-level module on no floor (add it to FLOORS)')
        for a, bs in sib.items():
            if len(a) != 1:
                continue
            for b in bs:
                if a[0] in level and b[0] in level and level[b[0]] > level[a[0]]:
                    up.append(f'{a[0]} (floor {level[a[0]]}) -> {b[0]} (floor {level[b[0]]}): ' + '; '.join(sorted(set(why[(a, b)]))[:3]))
    violations += len(sccs) + len(up)
    print(f'{name:20} pub {pub:5} pub(crate/super) {crate:4} two-file circles {len(circles):3} circles {len(sccs)} up a floor {len(up)}')
    if '--circles' in sys.argv:
        for a, b in sorted(circles):
            print('   ', '::'.join(a) or 'lib', '<->', '::'.join(b) or 'lib')
        for c in sccs:
            print('    circle', sorted('::'.join(x) or 'lib' for x in c))
            members = set(c)
            for a in sorted(c):
                for b in sorted(sib.get(a, ())):
                    if b in members:
                        print('       ', '::'.join(a), '->', '::'.join(b), ':', '; '.join(sorted(set(why[(a, b)]))[:3]))
        for u in up:
            print('    up a floor:', u)
    total_pub += pub; total_crate += crate
    cycles_all += list(circles)
print(f'TOTAL pub {total_pub} pub(crate/super) {total_crate} two-file circles {len(cycles_all)} circles and imports up a floor {violations}')
longest.sort(reverse=True)
print('longest functions:')
for n, w in longest[:10]:
    print(f'  {n:4} {w}')
longest_files.sort(reverse=True)
print('longest files (test code left out):')
for n, w in longest_files[:10]:
    print(f'  {n:4} {w}')
if '--check' in sys.argv or '--bounds' in sys.argv:
    over = [(n, w) for n, w in longest if n > MAX_FN_LINES] + [(n, w) for n, w in longest_files if n > MAX_FILE_LINES]
    if '--bounds' not in sys.argv:
        over = []
    for n, w in over:
        print(f'over the bound: {n} lines: {w}')
    if violations or over:
        print(f'structure check failed: {violations} circles or imports up a floor, {len(over)} over the bounds')
        sys.exit(1)
    print('structure check passed: no circle, no import up a floor'
          + (f', no file over {MAX_FILE_LINES} lines, no function over {MAX_FN_LINES}' if '--bounds' in sys.argv else ''))
