"""Replace CUDA libs of an aarch64 torch CUDA wheel by generated no-op stub .so files.
usage: mkstubs.py TORCH_LIB_DIR SYSROOT OUTDIR
"""
import subprocess, sys, os, re, collections
libdir, sysroot, out = sys.argv[1:4]
RE = "aarch64-linux-gnu-readelf"
# libs inside torch/lib that we replace by stubs (and delete the originals)
TORCH_CUDA = ["libcaffe2_nvrtc.so"]
DELETE = ["libtorch_cuda_linalg.so"]
KEEP = [f for f in os.listdir(libdir) if f.endswith((".so",)) or ".so." in f]
KEEP = [f for f in KEEP if f not in TORCH_CUDA + DELETE]
KEEP += ["../_C.cpython-311-aarch64-linux-gnu.so"]
SYS = [os.path.join(sysroot, p) for p in [
    "lib/aarch64-linux-gnu/libc.so.6", "lib/aarch64-linux-gnu/libm.so.6", "lib/aarch64-linux-gnu/libdl.so.2",
    "lib/aarch64-linux-gnu/libpthread.so.0", "lib/aarch64-linux-gnu/librt.so.1", "lib/aarch64-linux-gnu/libgcc_s.so.1",
    "lib/aarch64-linux-gnu/ld-linux-aarch64.so.1", "usr/lib/aarch64-linux-gnu/libstdc++.so.6", "lib/aarch64-linux-gnu/libz.so.1", "usr/bin/python3.11"]]
def needed(path):
    o = subprocess.run([RE, "-dW", path], capture_output=True, text=True).stdout
    return re.findall(r"\(NEEDED\)\s+Shared library: \[(.+?)\]", o)
def dynsyms(path):
    """yield (name, version, type, bind, ndx) for dynamic symbols"""
    o = subprocess.run([RE, "--dyn-syms", "-W", path], capture_output=True, text=True).stdout
    for line in o.splitlines():
        p = line.split()
        if len(p) < 8 or not p[0].endswith(":"): continue
        name = p[7]; ver = None
        if "@" in name:
            name, ver = re.split(r"@@?", name, maxsplit=1)
            ver = re.sub(r"\s*\(\d+\)$", "", ver)
        if len(p) > 8 and p[8].startswith("("): pass
        yield name, ver, p[3], p[4], p[6]
def vneeds(path):
    """map version name -> file, from .gnu.version_r"""
    o = subprocess.run([RE, "-V", "-W", path], capture_output=True, text=True).stdout
    m = {}; cur = None
    for line in o.splitlines():
        f = re.search(r"File: (\S+)", line)
        if f: cur = f.group(1); continue
        n = re.search(r"Name: (\S+)", line)
        if n and cur: m[n.group(1)] = cur
    return m
defined = set()
for f in SYS + [os.path.join(libdir, k) for k in KEEP]:
    for name, ver, typ, bind, ndx in dynsyms(f):
        if ndx != "UND": defined.add(name)
stub_files = set(TORCH_CUDA)
for k in KEEP + TORCH_CUDA:
    stub_files.update(n for n in needed(os.path.join(libdir, k)) if not os.path.exists(os.path.join(libdir, n)) and not any(os.path.basename(s) == n for s in SYS))
stub_files -= {"libgomp.so.1", "libgfortran.so.5"}
print("stubs:", sorted(stub_files))
syms = collections.defaultdict(dict)  # stubfile -> name -> (ver, type)
for k in KEEP:
    vm = vneeds(os.path.join(libdir, k))
    for name, ver, typ, bind, ndx in dynsyms(os.path.join(libdir, k)):
        if ndx != "UND" or name in defined or bind == "WEAK" or not name: continue
        tgt = vm.get(ver, "libcudart.so.13") if ver else "libcudart.so.13"
        syms[tgt][name] = (ver, typ)
# the stubbed torch CUDA libs also need their own NEEDED so loading order / SONAME are right: keep it minimal (no NEEDED)
os.makedirs(out, exist_ok=True)
for sf in sorted(stub_files):
    d = syms.get(sf, {})
    asm = [".bss", ".balign 64", "__stub_scratch: .zero 65536", ".text"]
    vers = collections.defaultdict(list)
    for name, (ver, typ) in sorted(d.items()):
        vers[ver].append(name)
        if typ == "OBJECT":
            asm += [".data", ".balign 16", f".globl {name}", f".type {name}, %object", f".size {name}, 256", f"{name}:", ".zero 256", ".text"]
        elif typ == "TLS":
            asm += [".section .tbss,\"awT\",%nobits", ".balign 16", f".globl {name}", f".type {name}, %tls_object", f".size {name}, 64", f"{name}:", ".zero 64", ".text"]
        else:
            if name.startswith("cuda") and name not in ("cudaGetErrorString", "cudaGetErrorName"):
                body = ["mov x0, #100", "ret"]   # cudaError_t cudaErrorNoDevice
            else:
                body = ["adrp x0, __stub_scratch", "add x0, x0, :lo12:__stub_scratch", "ret"]
            asm += [".balign 4", f".globl {name}", f".type {name}, %function", f"{name}:"] + body
    a = os.path.join(out, sf + ".s"); open(a, "w").write("\n".join(asm) + "\n")
    vs = os.path.join(out, sf + ".map")
    with open(vs, "w") as fh:
        named = [v for v in vers if v]
        for v in named:
            fh.write(f"{v} {{ global: " + " ".join(f"{n};" for n in vers[v]) + " };\n")
        fh.write("STUB_BASE { global: *; };\n" if not named else "")
    subprocess.run(["aarch64-linux-gnu-as", a, "-o", a + ".o"], check=True)
    cmd = ["aarch64-linux-gnu-ld", "-shared", "-soname", sf, "-o", os.path.join(out, sf), a + ".o"]
    if any(vers.keys()) and any(v for v in vers): cmd[1:1] = ["--version-script", vs]
    subprocess.run(cmd, check=True)
    print(f"{sf}: {len(d)} symbols, versions {[v for v in vers if v]}")
