#!/usr/bin/env python3
"""The files a request walks: per source file of one crate, the instructions
its code ran (inlined code counted in its own file), from a callgrind dump
of a binary built with line tables for that crate.

    cargo build --release -p pressure-cli \
      --config 'profile.release.package.pressure-gateway.debug="line-tables-only"' \
      --config 'profile.release.package.pressure-cli.strip="none"'
    PRESSURE_BIN=target/release/pressure CG_KEEP=/tmp/cg benches/callgrind-gateway.sh
    python3 scripts/request-walk.py /tmp/cg/cg-pressure-_.out [pressure-gateway/src/] [N]

With N (the requests of the dump, CG_REQUESTS), the figures are per
request and files under one instruction per request are left out.
"""
import re,sys,collections
def walk(path):
    names={}
    def name(tok):
        m=re.match(r'\((\d+)\)(?: (.*))?',tok.strip())
        if not m: return tok.strip()
        i,nm=m.group(1),m.group(2)
        if nm: names[i]=nm
        return names.get(i,'?')
    fl=None; cur=None; skip=False
    cost=collections.Counter()
    for line in open(path, errors='replace'):
        if line.startswith('fl='):
            fl=name(line[3:]); cur=fl
        elif line.startswith(('fi=','fe=')):
            cur=name(line[3:])
        elif line.startswith('fn='):
            cur=fl
        elif line.startswith(('cfi=','cfl=')):
            name(line[4:])
        elif line.startswith(('cfn=','cob=','ob=')):
            pass
        elif line.startswith('calls='):
            skip=True
        elif line and (line[0].isdigit() or line[0] in '+-*'):
            if skip:
                skip=False; continue
            parts=line.split()
            if len(parts)>=2:
                try: cost[cur]+=int(parts[1])
                except ValueError: pass
    return cost
c=walk(sys.argv[1])
pat=sys.argv[2] if len(sys.argv)>2 else 'pressure-gateway/src/'
n=int(sys.argv[3]) if len(sys.argv)>3 else 1
files=sorted(((v/n,k) for k,v in c.items() if k and pat in k and v/n>=(1 if n>1 else 0)), reverse=True)
for v,k in files: print(f'{v:>12.1f} {k[k.index(pat)+len(pat):]}')
print(len(files),'files')
