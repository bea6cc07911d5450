#!/usr/bin/env python3
"""mutation-sweep.py - how much of the library's code the C tests guard.

Makes small changes to the library's source one at a time (a + for a -, a
< for a <=, && for ||, an fma for an fms, a small constant plus one), and
for each rebuilds the library and runs the ctest suite: a change that some
test fails on is "killed"; one that every test passes is "survived" and
printed, for a person to read. A survivor is either equivalent (a choice
between two paths that give the same bits, a prefetch distance, a byte a
shuffle then drops, an array bound the sanitizers would catch) or a gap in
the tests, which a new test should close (and then kill it: re-run with
the same --seed).

It works on a clone of the repository's HEAD (uncommitted changes are not
in it) in --work, built Release without the benchmarks; ctest there must
pass first. Vector headers of paths this CPU cannot run (vec_neon.h on
x86-64, vec_avx512.h without AVX-512) are left out: no test here runs
them. Changes that do not compile are not counted. About 20-40 s a change
on 2 cores.

Usage: scripts/mutation-sweep.py [--count N] [--seed S] [--work DIR]
                                 [--files A,B,...] [--timeout S]
  --count N    changes to test (default 40)
  --seed S     which changes (default 1); the same seed, the same changes
  --work DIR   the clone and its build (default /tmp/pe-mutants)
  --files ...  source files relative to the repository (default: the
               kernel templates, the vector headers this CPU runs,
               src/check/*.c and src/rope/engine.c); a file under python/
               (the compiled module python/posenc/_posenc.c) is judged by
               the Python tests instead: the module rebuilt, pytest run;
               so is a Python source (python/posenc/*.py), its changes
               found by the tokenizer (operators, and/or, small integers)
  --timeout S  ctest's per-test timeout (default 120; a hang counts as killed)
Prints a line per change and a summary; the JSON lines go to DIR/mutants.jsonl.
"""
import argparse
import glob
import io
import json
import os
import random
import re
import signal
import subprocess
import sys
import time
import tokenize

# (pattern, replacement); None: the matched integer plus one
OPS = [
    (r'(?<![+\-=<>!&|*/])\+(?![+=])', '-'),
    (r'(?<![\-=<>!&|>*/])-(?![\->=])', '+'),
    (r'<=', '<'), (r'>=', '>'),
    (r'(?<![<-])<(?![<=])', '<='), (r'(?<![>-])>(?![>=])', '>='),
    (r'==', '!='), (r'!=', '=='),
    (r'&&', '||'), (r'\|\|', '&&'),
    (r'\bvf_add\b', 'vf_sub'), (r'\bvf_sub\b', 'vf_add'),
    (r'\bvf_fma\b', 'vf_fms'), (r'\bvf_fms\b', 'vf_fma'),
    (r'_fmadd_ps', '_fmsub_ps'), (r'_fmsub_ps', '_fmadd_ps'),
    (r'\b([2-9]|1[0-9]|3[12]|64)\b', None),
]


# The compiled Python module, rebuilt and judged by the Python tests (with
# torch, as `make test` runs them first; -x: the first failure is enough).
PY_BUILD = '/usr/bin/python3 python/build_backend/posenc_build.py --inplace'
PY_TEST = ('POSENC_LIBRARY=$PWD/build/libposenc.so PYTHONPATH=$PWD/python '
           'PYTHONDONTWRITEBYTECODE=1 '
           '/usr/bin/python3 -m pytest -q -x -p no:cacheprovider python/tests')

# The pure-Python package: the same kinds of change, found by the tokenizer
# (so strings, docstrings and comments are never touched); the source's own
# compile check stands in for the build.
PY_OPS = {'+': '-', '-': '+', '<=': '<', '>=': '>', '<': '<=', '>': '>=',
          '==': '!=', '!=': '==', 'and': 'or', 'or': 'and'}
PY_INT = re.compile(r'([2-9]|1[0-9]|3[12]|64)$')


def code_of(line):
    """The line with comments and string literals blanked (same length)."""
    line = re.sub(r'/\*.*?\*/', lambda m: ' ' * len(m.group()), line)
    line = re.sub(r'//.*', lambda m: ' ' * len(m.group()), line)
    return re.sub(r'"(\\.|[^"\\])*"', lambda m: '"' + ' ' * (len(m.group()) - 2) + '"', line)


def py_sites(path):
    """sites() of a Python source: operators, and/or and small integers."""
    out = []
    for t in tokenize.generate_tokens(io.StringIO(open(path).read()).readline):
        if t.start[0] != t.end[0]:
            continue
        if (t.type == tokenize.OP or t.type == tokenize.NAME) and t.string in PY_OPS:
            out.append((t.start[0] - 1, t.start[1], t.end[1], PY_OPS[t.string]))
        elif t.type == tokenize.NUMBER and PY_INT.match(t.string):
            out.append((t.start[0] - 1, t.start[1], t.end[1], None))
    return out


def sites(path):
    """Every (line index, start, end, replacement) a change can be made at;
    replacement None: the integer there plus one."""
    if path.endswith('.py'):
        return py_sites(path)
    out, in_comment = [], False
    for i, line in enumerate(open(path).read().split('\n')):
        s = line.strip()
        if in_comment:
            in_comment = '*/' not in s
            continue
        if s.startswith('/*') and '*/' not in s:
            in_comment = True
            continue
        if not s or s.startswith(('*', '//', '#include', '#if', '#else', '#endif', '#pragma', '#error')):
            continue
        code = code_of(line)
        if '/*' in code or '*/' in code:
            continue
        for pat, rep in OPS:
            out += [(i, m.start(), m.end(), rep) for m in re.finditer(pat, code)]
    return out


def sh(cmd, cwd, timeout):
    """(exit code, output) of a shell command; 'timeout' when it ran too
    long - then its whole process group is killed (a test the shell started
    would otherwise keep running, and keep the output pipe open)."""
    p = subprocess.Popen(cmd, shell=True, cwd=cwd, stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        out, _ = p.communicate(timeout=timeout)
        return p.returncode, out
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        p.communicate()
        return 'timeout', ''


def default_files(repo, work):
    files = sorted(os.path.relpath(f, repo) for f in glob.glob(os.path.join(repo, 'src/kernels/*_template.h')))
    paths = subprocess.run([os.path.join(repo, 'scripts/isa-paths.sh'), '-q',
                            os.path.join(work, 'build/libposenc.so')],
                           capture_output=True, text=True).stdout.split()
    if 'avx2' in paths:
        files.append('src/kernels/vec_avx2.h')
    if 'avx512' in paths:
        files.append('src/kernels/vec_avx512.h')
    if 'neon' in paths:
        files.append('src/kernels/vec_neon.h')
    files += sorted(os.path.relpath(f, repo) for f in glob.glob(os.path.join(repo, 'src/check/*.c')))
    return files + ['src/rope/engine.c']


def main():
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    ap = argparse.ArgumentParser(add_help=False)
    ap.add_argument('--count', type=int, default=40)
    ap.add_argument('--seed', type=int, default=1)
    ap.add_argument('--work', default='/tmp/pe-mutants')
    ap.add_argument('--files', default='')
    ap.add_argument('--timeout', type=int, default=120)
    ap.add_argument('-h', '--help', action='store_true')
    a = ap.parse_args()
    if a.help:
        print(__doc__.split('\n', 2)[2].strip())
        return 0
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    work = os.path.abspath(a.work)
    jobs = str(os.cpu_count() or 2)
    if os.path.exists(work):
        subprocess.run(['rm', '-rf', work], check=True)
    subprocess.run(['git', 'clone', '--quiet', '--shared', repo, work], check=True)
    for cmd in ('cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DPE_BUILD_BENCH=OFF',
                f'cmake --build build -j{jobs}', f'cd build && ctest -j{jobs} --timeout {a.timeout}'):
        rc, log = sh(cmd, work, 3600)
        if rc != 0:
            print(f'mutation-sweep: "{cmd}" failed in {work} before any change:\n{log[-3000:]}', file=sys.stderr)
            return 1
    files = a.files.split(',') if a.files else default_files(repo, work)
    if any(f.startswith('python/') for f in files):
        for cmd in (PY_BUILD, PY_TEST):
            rc, log = sh(cmd, work, 3600)
            if rc != 0:
                print(f'mutation-sweep: "{cmd}" failed in {work} before any change:\n{log[-3000:]}',
                      file=sys.stderr)
                return 1
    pool = [(f, s) for f in files for s in sites(os.path.join(work, f))]
    random.Random(a.seed).shuffle(pool)
    out_path = os.path.join(work, 'mutants.jsonl')
    counts = {'killed': 0, 'survived': 0, 'nocompile': 0}
    survivors = []
    print(f'{len(pool)} sites in {len(files)} files; testing {a.count} changes (seed {a.seed})')
    with open(out_path, 'w') as out:
        for f, (i, s0, s1, rep) in pool:
            if counts['killed'] + counts['survived'] >= a.count:
                break
            path = os.path.join(work, f)
            orig = open(path).read()
            lines = orig.split('\n')
            old = lines[i]
            tok = old[s0:s1]
            lines[i] = old[:s0] + (str(int(tok) + 1) if rep is None else rep) + old[s1:]
            open(path, 'w').write('\n'.join(lines))
            t0 = time.time()
            py = f.startswith('python/')
            try:
                build = (f'/usr/bin/python3 -c "import ast,sys; ast.parse(open(sys.argv[1]).read())" {f}'
                         if f.endswith('.py') else PY_BUILD if py else f'cmake --build build -j{jobs}')
                rc, log = sh(build, work, 900)
                if rc != 0:
                    status, by = 'nocompile', ''
                elif py:
                    rc, log = sh(PY_TEST, work, a.timeout * 4)
                    failed = re.findall(r'FAILED \S+::(\S+)', log)
                    status = 'survived' if rc == 0 else 'killed'
                    by = ('' if rc == 0 else ','.join(failed[:3]) if failed
                          else 'timeout' if rc == 'timeout' else f'exit {rc}')
                else:
                    rc, log = sh(f'cd build && ctest -j{jobs} --timeout {a.timeout} --stop-on-failure', work, 3600)
                    failed = re.findall(r'\d+ - (\S+) \(', log)
                    status = 'survived' if rc == 0 else 'killed'
                    by = ','.join(failed[:3]) if failed else ('timeout' if rc == 'timeout' else '')
            finally:
                open(path, 'w').write(orig)
            counts[status] += 1
            rec = {'file': f, 'line': i + 1, 'old': old.strip(), 'new': lines[i].strip(),
                   'status': status, 'by': by, 'seconds': round(time.time() - t0)}
            out.write(json.dumps(rec) + '\n')
            out.flush()
            if status != 'nocompile':
                print(f'{status:8} {f}:{i + 1}  {lines[i].strip()[:100]}' + (f'  ({by})' if by else ''),
                      flush=True)
            if status == 'survived':
                survivors.append(rec)
    sh(f'cmake --build build -j{jobs}', work, 900)
    if any(f.startswith('python/') for f in files):
        sh(PY_BUILD, work, 900)
    n = counts['killed'] + counts['survived']
    print(f'\n{n} changes: {counts["killed"]} killed, {counts["survived"]} survived '
          f'({counts["nocompile"]} more did not compile)')
    for r in survivors:
        print(f'survived {r["file"]}:{r["line"]}\n  - {r["old"]}\n  + {r["new"]}')
    return 0


if __name__ == '__main__':
    sys.exit(main())
