#!/usr/bin/env bash
# A kernel's function attributes (dynamic shared memory, cluster sizes) and a library handle belong to the device
# that was current when they were made, so the CUDA backend makes them once per device (cuda::PerDevice,
# src/backend/cuda/common/per_device.h). A function-local `static` holding the result of cudaFuncSetAttribute,
# cublasLtCreate or a device attribute query would set it on the first GPU only, and a model spread over several
# GPUs would then fail its launches, or size its grids, on the others. Usage: per_device_state.sh ROOT
set -euo pipefail
root="${1:?usage: per_device_state.sh SOURCE_ROOT}"
python3 - "$root" <<'PY'
import pathlib, re, sys
root = pathlib.Path(sys.argv[1])
src = root / "src" / "backend" / "cuda"
files = sorted(p for p in src.rglob("*") if p.suffix in (".cu", ".cuh", ".cpp", ".h"))
if not files:
    sys.exit(f"no source under {src}: wrong source root?")
# a `static` declaration whose initialiser (up to its `;`, possibly a lambda) calls a per-device API
per_device_api = re.compile(r"cudaFuncSetAttribute|cublasLtCreate|cublasCreate|cudaDeviceGetAttribute|"
                            r"cudaGetDeviceProperties|cudaOccupancy\w*")
bad = []
for f in files:
    text = f.read_text()
    for m in re.finditer(r"\bstatic\s+(?!constexpr|inline|_|void|Status|Result|bool\s+\w+\()[^;{]*?=", text):
        end = text.find(";", m.end())
        # a lambda initialiser runs to its closing `}();`
        if text[m.end():m.end() + 40].lstrip().startswith("["):
            end = text.find("}();", m.end())
        init = text[m.end():end]
        if per_device_api.search(init):
            line = text.count("\n", 0, m.start()) + 1
            bad.append(f"{f.relative_to(root)}:{line}: {text[m.start():m.end()].strip()} ... "
                       f"{per_device_api.search(init).group(0)}")
    # a once-per-process initialisation (std::call_once) that makes per-device state
    for m in re.finditer(r"std::call_once\(", text):
        end = text.find("});", m.end())
        body = text[m.end():end]
        if per_device_api.search(body):
            line = text.count("\n", 0, m.start()) + 1
            bad.append(f"{f.relative_to(root)}:{line}: std::call_once ... {per_device_api.search(body).group(0)}")
if bad:
    print("process-wide statics made from per-device state (use cuda::PerDevice):", *bad, sep="\n  ")
    sys.exit(1)
print(f"{len(files)} backend sources: no per-device state in a process-wide static")
PY
