#!/usr/bin/env python3
"""Surface and structure counts for the pressure workspace (issue 21).

pub items (pub / pub(crate)) per crate, import circles between files of one
module (strongly connected components of `crate::` references), the longest
functions. Run from the checkout root: python3 scripts/measure-surface.py [--circles]
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

total_pub = total_crate = 0
cycles_all = []
longest = []
for root in ROOTS:
    src = os.path.join(root, 'src')
    if not os.path.isdir(src):
        continue
    mods = {}
    for p in files(src if False else root):
        mods[modpath(src, p)] = p
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
        for r in refs:
            # longest prefix that is a module file
            for n in range(len(r), 0, -1):
                if r[:n] in mods and r[:n] != mp:
                    edges[mp].add(r[:n]); break
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
        for w in edges.get(v, ()):
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
    for v in list(mods):
        if v not in index: sc(v)
    # circles between files of one module: pairs a->b->a with same parent
    circles = set()
    for a in mods:
        for b in edges.get(a, ()):
            if a in edges.get(b, ()) and a < b:
                circles.add((a, b))
    name = os.path.basename(root)
    print(f'{name:20} pub {pub:5} pub(crate/super) {crate:4} two-file circles {len(circles):3} SCCs>1 {len(sccs)}')
    if '--circles' in sys.argv:
        for a, b in sorted(circles):
            print('   ', '::'.join(a) or 'lib', '<->', '::'.join(b) or 'lib')
        for c in sccs:
            print('    SCC', sorted('::'.join(x) or 'lib' for x in c))
    total_pub += pub; total_crate += crate
    cycles_all += list(circles)
print(f'TOTAL pub {total_pub} pub(crate/super) {total_crate} two-file circles {len(cycles_all)}')
longest.sort(reverse=True)
print('longest functions:')
for n, w in longest[:10]:
    print(f'  {n:4} {w}')
