#!/usr/bin/env bash
# scripts/gpu-check's argument handling, GPU detection and dry run, without a GPU
# (CTest label `scripts`): --help; the refusal without nvidia-smi or without a device
# (exit 3, before building anything); the architecture from nvidia-smi's compute
# capability and from --cuda-arch; NCCL from --nccl-root and from PyTorch's wheel; the
# --deps environment; usage errors (exit 2) and missing dependencies (exit 4). A
# stand-in nvidia-smi (TESSERA_NVIDIA_SMI) plays the GPU node.
# Usage: check_gpu_check.sh SOURCE_DIR WORK_DIR
set -euo pipefail
src=$1 work=$2
check=$src/scripts/gpu-check
rm -rf "$work"; mkdir -p "$work/bin"
build=$work/build   # never created: every run below stops before building

fail() { printf 'FAIL: %s\n' "$*" >&2; exit 1; }
# expect CODE REGEX ARGS...: gpu-check exits with CODE and its output matches REGEX.
expect() {
  local code=$1 regex=$2 out rc; shift 2
  out=$("$check" --build "$build" "$@" 2>&1) && rc=0 || rc=$?
  [ "$rc" = "$code" ] || fail "gpu-check $* exited $rc, expected $code:"$'\n'"$out"
  grep -Eq -- "$regex" <<<"$out" || fail "gpu-check $*: no line matches '$regex':"$'\n'"$out"
  last=$out
}

# Stand-ins: a node with two H100s, a node whose driver sees none, an NCCL tree, a wheel.
cat >"$work/bin/smi-two-h100" <<'SH'
#!/bin/sh
case "$*" in
  *compute_cap*) printf '9.0\n9.0\n' ;;
  *) printf 'NVIDIA H100 80GB HBM3, 550.54.15\nNVIDIA H100 80GB HBM3, 550.54.15\n' ;;
esac
SH
cat >"$work/bin/smi-old-driver" <<'SH'
#!/bin/sh
case "$*" in
  *compute_cap*) echo 'Field "compute_cap" is not a valid field to query.'; exit 2 ;;
  *) echo 'Tesla V100-SXM2-32GB, 470.57.02' ;;
esac
SH
cat >"$work/bin/smi-none" <<'SH'
#!/bin/sh
echo "No devices were found"; exit 6
SH
mkdir -p "$work/nccl/include" "$work/nccl/lib" "$work/site/nvidia/nccl/include" "$work/site/nvidia/nccl/lib"
touch "$work/nccl/include/nccl.h" "$work/nccl/lib/libnccl.so.2" \
      "$work/site/nvidia/nccl/include/nccl.h" "$work/site/nvidia/nccl/lib/libnccl.so.2"
# A python whose nvidia.nccl lives in $work/site, and an nvcc whose toolkit has no NCCL.
printf '#!/bin/sh\necho %s\n' "$work/site/nvidia/nccl" >"$work/bin/python"
mkdir -p "$work/cuda/bin" && printf '#!/bin/sh\nexit 0\n' >"$work/cuda/bin/nvcc"
chmod +x "$work"/bin/* "$work/cuda/bin/nvcc"

expect 0 '--deps PREFIX' --help
grep -q 'gpu-deps-prefix fetch DIR' <<<"$last" || fail "--help does not explain how to prepare the prefix"

# No GPU: a clear message and exit 3, and nothing built.
export TESSERA_NVIDIA_SMI=$work/bin/no-such-nvidia-smi
expect 3 'error: no GPU: no .*nvidia-smi on PATH.*Nothing was built'
export TESSERA_NVIDIA_SMI=$work/bin/smi-none
expect 3 'error: no GPU: nvidia-smi lists no GPU: No devices were found'
[ ! -e "$build" ] || fail "gpu-check without a GPU created $build"

# The dry run without a GPU: --cuda-arch decides; --nccl-root's paths reach CMake.
expect 0 '-DCMAKE_CUDA_ARCHITECTURES=90 ' --dry-run --cuda-arch 90 --nccl-root "$work/nccl"
grep -q -- "-DTESSERA_ENABLE_NCCL=ON -DNCCL_INCLUDE_DIR=$work/nccl/include -DNCCL_LIBRARY=$work/nccl/lib/libnccl.so.2" <<<"$last" ||
  fail "--nccl-root: the NCCL paths are not on the cmake line:"$'\n'"$last"
grep -Eq '^ctest --test-dir .* -L cuda ' <<<"$last" || fail "the dry run does not run ctest -L cuda:"$'\n'"$last"

# A node with two GPUs: compute capability 9.0 -> 90; 2 ranks on the first GPU, then one
# rank per GPU (domain 2), each beside the host run; NCCL from the wheel.
export TESSERA_NVIDIA_SMI=$work/bin/smi-two-h100
PATH=$work/cuda/bin:$PATH NCCL_ROOT= NCCL_HOME= CUDA_HOME= \
  expect 0 '# GPUs: 2 x NVIDIA H100 80GB HBM3 \(driver 550.54.15, compute 9.0\)' --dry-run --python "$work/bin/python"
for want in "-DCMAKE_CUDA_ARCHITECTURES=90 " "-DCMAKE_CUDA_COMPILER=$work/cuda/bin/nvcc" \
            "-DNCCL_INCLUDE_DIR=$work/site/nvidia/nccl/include" "NCCL: PyTorch's wheel" \
            "CUDA_VISIBLE_DEVICES=<the first GPU> timeout 180 mpiexec -n 2 " \
            '--set=device=host --set=parallelism=\{data:\ none\,\ domain:\ 2\}'; do
  grep -qF -- "$want" <<<"$last" || fail "two GPUs: missing '$want':"$'\n'"$last"
done
[ "$(grep -c -- '--set=device=cuda' <<<"$last")" = 2 ] || fail "two GPUs: expected 2 device trainings:"$'\n'"$last"
expect 0 '-DTESSERA_ENABLE_NCCL=OFF' --dry-run --no-nccl
# A driver too old to report the compute capability: --cuda-arch is needed.
export TESSERA_NVIDIA_SMI=$work/bin/smi-old-driver
expect 4 'does not report the GPUs. compute capability.*give --cuda-arch'
expect 0 '-DCMAKE_CUDA_ARCHITECTURES=70 ' --dry-run --cuda-arch 70
[ ! -e "$build" ] || fail "gpu-check created $build before building"

# --deps: the prefix's environment and wrappers; a directory that is not one is refused.
mkdir -p "$work/prefix/usr/lib/x86_64-linux-gnu" && echo x86_64-linux-gnu >"$work/prefix/.tessera-deps-prefix"
expect 0 "^export PATH=\"$work/prefix/usr/bin" --dry-run --deps "$work/prefix"
grep -qF -- "-DMPI_CXX_COMPILER=$work/prefix/usr/bin/mpicxx" <<<"$last" || fail "--deps: no prefix mpicxx:"$'\n'"$last"
grep -qF -- "$work/prefix/usr/bin/mpiexec -n 2 " <<<"$last" || fail "--deps: not the prefix's mpiexec:"$'\n'"$last"
expect 4 "not a prefix made by 'scripts/gpu-deps-prefix unpack" --dry-run --deps "$work/nccl"
expect 0 '-DTESSERA_ENABLE_CUDA=OFF' --dry-run --host-only

# Usage errors and missing pieces.
expect 2 "unknown argument '--gpus'" --gpus 2
expect 2 '--cuda-arch takes' --cuda-arch sm90 --dry-run
expect 2 '--jobs must be a positive integer' --jobs 0
expect 2 'exclude each other' --no-nccl --nccl-root "$work/nccl"
expect 4 "--nccl-root $work/prefix: no include/nccl.h" --dry-run --nccl-root "$work/prefix"
echo "gpu-check: help, no-GPU refusals, dry runs (no GPU, two GPUs, --deps, --host-only) and usage errors as documented"
