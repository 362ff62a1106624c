"""The __global__ functions of the CUDA backend's sources, found by reading the text (no compiler): shared by the
pdl_enter lint (tests/lint/pdl_enter.sh) and scripts/removal-patch."""
import pathlib
import re
from dataclasses import dataclass


@dataclass
class Kernel:
    path: pathlib.Path  # the source file
    name: str           # the function's name (templates: without arguments)
    line: int           # 1-based line of its __global__
    body: int           # index in the file's text of the body's opening brace
    first: str          # the body's first line, stripped


def kernels_in(path: pathlib.Path, text: str):
    """Every __global__ definition in one file's text (declarations and commented-out lines skipped)."""
    for m in re.finditer(r"__global__", text):
        line_start = text.rfind("\n", 0, m.start()) + 1
        if text[line_start:m.start()].strip().startswith("//"):
            continue
        # the body's opening brace is the first '{' after the parameter list; the name is the identifier before the
        # last top-level '(' (the first one may be __launch_bounds__'s)
        j, depth, name, seen = m.end(), 0, "", False
        while j < len(text):
            c = text[j]
            if c == "(":
                if depth == 0:
                    ident = re.search(r"([A-Za-z_]\w*)\s*$", text[m.end():j])
                    name = ident.group(1) if ident else ""
                depth, seen = depth + 1, True
            elif c == ")":
                depth -= 1
            elif c == ";" and depth == 0:
                j = -1  # a declaration
                break
            elif c == "{" and depth == 0 and seen:
                break
            j += 1
        if j < 0 or j >= len(text):
            continue
        first = text[j + 1:].lstrip().split("\n", 1)[0].strip()
        yield Kernel(path, name, text.count("\n", 0, m.start()) + 1, j, first)


def backend_kernels(root):
    """(path, text, kernels) of every .cu / .cuh file under ROOT/src/backend/cuda, in path order."""
    base = pathlib.Path(root) / "src" / "backend" / "cuda"
    for f in sorted(list(base.rglob("*.cu")) + list(base.rglob("*.cuh"))):
        text = f.read_text()
        yield f, text, list(kernels_in(f, text))
