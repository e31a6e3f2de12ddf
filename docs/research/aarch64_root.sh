#!/bin/bash
# Build an emulated aarch64 CPython 3.11 user space.
# usage: build_root.sh ROOT VARIANT     VARIANT = pypi    (torch 2.10.0 CPU + executorch 1.1.0; no hacks)
#                                              = matched (torch 2.14.1 CUDA wheel with stubbed NVIDIA libs + executorch 1.5.1)
# needs (host, Debian bookworm): apt-get install -y qemu-user-static mmdebstrap binutils-aarch64-linux-gnu
set -euo pipefail
ROOT=$(realpath -m "$1"); VARIANT=${2:-pypi}
HERE=$(dirname "$(realpath "$0")")
PIP=${PIP:-$HERE/tools/bin/pip}          # any host pip >= 23; a venv avoids touching system python
NPROC=$(nproc)
t0=$(date +%s)

# 1. Debian arm64 python3.11 + libc (only extracts .debs, no qemu needed); ~6 s, ~75 MB
mmdebstrap --variant=extract --architectures=arm64 \
  --include=python3.11-minimal,libpython3.11-stdlib,libstdc++6,libgcc-s1 \
  bookworm "$ROOT" http://deb.debian.org/debian "http://deb.debian.org/debian-security bookworm-security main"
ln -sf python3.11 "$ROOT/usr/bin/python3"
rm -rf "$ROOT"/usr/share/{doc,man,locale,info}

# 2. fake /proc/cpuinfo and MIDR (qemu's -L prefix also redirects these paths); without cpuinfo onnxruntime segfaults under qemu 7.2
FEAT=$(qemu-aarch64-static -L "$ROOT" "$ROOT/usr/bin/python3.11" -c '
import ctypes; l=ctypes.CDLL(None); l.getauxval.restype=ctypes.c_ulong; h1,h2=l.getauxval(16),l.getauxval(26)
n1="fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics fphp asimdhp cpuid asimdrdm jscvt fcma lrcpc dcpop sha3 sm3 sm4 asimddp sha512 sve asimdfhm dit uscat ilrcpc flagm ssbs sb paca pacg".split()
n2="dcpodp sve2 sveaes svepmull svebitperm svesha3 svesm4 flagm2 frint svei8mm svef32mm svef64mm svebf16 i8mm bf16 dgh rng bti mte ecv afp rpres mte3 sme sme_i16i64 sme_f64f64 sme_i8i32 sme_f16f32 sme_b16f32 sme_f32f32 sme_fa64".split()
print(" ".join([n for i,n in enumerate(n1) if h1>>i&1]+[n for i,n in enumerate(n2) if h2>>i&1]))')
mkdir -p "$ROOT/proc"; : > "$ROOT/proc/cpuinfo"
for i in $(seq 0 $((NPROC-1))); do
  printf 'processor\t: %d\nBogoMIPS\t: 50.00\nFeatures\t: %s\nCPU implementer\t: 0x41\nCPU architecture: 8\nCPU variant\t: 0x3\nCPU part\t: 0xd0c\nCPU revision\t: 1\n\n' "$i" "$FEAT" >> "$ROOT/proc/cpuinfo"
  mkdir -p "$ROOT/sys/devices/system/cpu/cpu$i/regs/identification"
  echo 0x00000000413fd0c1 > "$ROOT/sys/devices/system/cpu/cpu$i/regs/identification/midr_el1"
done
t1=$(date +%s)

# 3. wheels (always --no-deps: pip evaluates markers for the HOST, it would pull x86-only nvidia/triton deps)
SP=$ROOT/usr/lib/python3/dist-packages; mkdir -p "$SP"
if [ "$VARIANT" = pypi ]; then TORCH=torch==2.10.0; ET=executorch==1.1.0; else TORCH=torch==2.14.1; ET=executorch==1.5.1; fi
PIP_CONSTRAINT= "$PIP" install -q --no-deps --target "$SP" \
  --platform manylinux_2_28_aarch64 --platform manylinux_2_27_aarch64 --platform manylinux_2_17_aarch64 --platform manylinux2014_aarch64 \
  --only-binary=:all: --python-version 3.11 --implementation cp --abi cp311 \
  numpy onnxruntime==1.32.0 flatbuffers packaging protobuf \
  $TORCH filelock typing-extensions sympy mpmath networkx jinja2 markupsafe fsspec \
  $ET ruamel.yaml pyyaml tabulate 2>&1 | grep -v "is ignored" || true
rm -rf "$SP/torch/include" "$SP/bin"        # C++ headers (64 MB), only needed to compile extensions
t2=$(date +%s)

# 4. matched variant: replace NVIDIA libs by stubs, strip, make the CUDA fatbin sparse
if [ "$VARIANT" = matched ]; then
  L=$SP/torch/lib; S=$(mktemp -d)
  python3 "$HERE/stubs/mkstubs.py" "$L" "$ROOT" "$S" > "$S/log"
  for f in "$S"/lib*.so*; do case $f in *.s|*.o|*.map|*caffe2_nvrtc*) ;; *) cp "$f" "$L/";; esac; done
  rm -f "$L/libcaffe2_nvrtc.so" "$L/libtorch_cuda_linalg.so"
  for f in libtorch_cpu.so libtorch_python.so libtorch_cuda.so libarm_compute.so; do aarch64-linux-gnu-strip --strip-unneeded "$L/$f"; done
  python3 - "$L/libtorch_cuda.so" <<'EOF'
import subprocess, re, sys
f = sys.argv[1]
o = subprocess.run(["aarch64-linux-gnu-readelf", "-SW", f], capture_output=True, text=True).stdout
for l in o.splitlines():
    m = re.search(r'\]\s+(\S+)\s+\S+\s+([0-9a-f]+)\s+([0-9a-f]+)\s+([0-9a-f]+)', l)
    if m and m.group(1) == ".nv_fatbin": off, size = int(m.group(3), 16), int(m.group(4), 16)
with open(f, "r+b") as fh:
    fh.seek(off)
    while size: n = min(size, 1 << 20); fh.write(b"\0" * n); size -= n
EOF
  fallocate --dig-holes "$L/libtorch_cuda.so"
  rm -rf "$S"
else
  for f in libtorch_cpu.so libtorch_python.so libarm_compute.so; do aarch64-linux-gnu-strip --strip-unneeded "$SP/torch/lib/$f"; done
fi
t3=$(date +%s)
echo "TIMES: rootfs $((t1-t0))s, wheels $((t2-t1))s, post $((t3-t2))s, total $((t3-t0))s"
du -sh "$ROOT"
