#!/usr/bin/env python3
"""Which kernels' machine code a change altered, with nvcc alone (no GPU,
no cuobjdump): compiles src/cuda/*.cu of two source trees for one
architecture and compares each kernel's .text section of the cubins
(names of anonymous namespaces normalised).

    git archive <rev> | tar x -C /tmp/old
    python3 tools/gpu-tests/compare_machine_code.py /tmp/old . [--arch 90]
"""
import argparse, concurrent.futures, hashlib, os, re, struct, subprocess, sys, tempfile


def kernels(cubin):
    """{kernel section name: sha1 of its machine code} of an ELF64 cubin."""
    b = open(cubin, 'rb').read()
    shoff = struct.unpack_from('<Q', b, 0x28)[0]
    shentsize, shnum, shstrndx = struct.unpack_from('<HHH', b, 0x3A)
    hdrs = [struct.unpack_from('<IIQQQQIIQQ', b, shoff + i * shentsize) for i in range(shnum)]
    strings = hdrs[shstrndx][4]
    out = {}
    for h in hdrs:
        end = b.index(b'\0', strings + h[0])
        name = b[strings + h[0]:end].decode()
        if name.startswith('.text.'):
            name = re.sub(r'_GLOBAL__N__[0-9a-f]+_\d+_\w+?_[0-9a-f]{8}', 'ANON', name)
            out[name] = hashlib.sha1(b[h[4]:h[4] + h[5]]).hexdigest()
    return out


def compile_tree(tree, arch, out):
    src = os.path.join(tree, 'src')
    files = sorted(f for f in os.listdir(os.path.join(src, 'cuda')) if f.endswith('.cu'))
    def one(f):
        cubin = os.path.join(out, f[:-3] + '.cubin')
        subprocess.run(['nvcc', '-O3', '-std=c++17', '-I' + os.path.join(tree, 'inst', 'include'),
                        '-I' + src, '-gencode', f'arch=compute_{arch},code=sm_{arch}', '-cubin',
                        os.path.join(src, 'cuda', f), '-o', cubin], check=True)
        return f, kernels(cubin)
    with concurrent.futures.ThreadPoolExecutor(os.cpu_count()) as pool:
        return dict(pool.map(one, files))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('old'); ap.add_argument('new'); ap.add_argument('--arch', default='90')
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as t_old, tempfile.TemporaryDirectory() as t_new:
        old, new = compile_tree(a.old, a.arch, t_old), compile_tree(a.new, a.arch, t_new)
    changed = 0
    for f in sorted(set(old) | set(new)):
        o, n = old.get(f, {}), new.get(f, {})
        diff = sorted(k for k in o if k in n and o[k] != n[k])
        gone, added = sorted(set(o) - set(n)), sorted(set(n) - set(o))
        same = sum(1 for k in o if n.get(k) == o[k])
        print(f'{f:26s} same {same:4d}  changed {len(diff):3d}  removed {len(gone):3d}  added {len(added):3d}')
        for k in diff: print('    changed', k)
        changed += len(diff) + len(gone) + len(added)
    return 0 if changed == 0 else 1


if __name__ == '__main__':
    sys.exit(main())
