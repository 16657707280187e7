#!/usr/bin/python3
"""tessera's orthogonal and dirac init types against PyTorch's nn.init.

init_types_dump writes each orthogonal master with the Gaussian matrix it was built
from; torch.nn.init.orthogonal_ is run on that same matrix (its normal_ draw replaced
by it) and the two masters must agree to 1e-12 of the gain. dirac masters must equal
torch.nn.init.dirac_ (eye_ for 2-dim weights) exactly.

    /usr/bin/python3 check_init_types_torch.py INIT_TYPES_DUMP WORKDIR

Exits 77 (CTest: skipped) when torch cannot be imported, 1 on any failure.
"""

import os
import subprocess
import sys

import numpy as np

try:
    import torch
except ImportError:
    print("SKIP: torch is not importable by", sys.executable)
    sys.exit(77)


def main():
    dump, workdir = sys.argv[1], sys.argv[2]
    os.makedirs(workdir, exist_ok=True)
    subprocess.run([dump, workdir], check=True)
    failures = 0
    cases = 0
    with open(os.path.join(workdir, "manifest.txt")) as manifest:
        lines = manifest.read().split("\n")
    for line in filter(None, lines):
        case, kind, dims, option = line.split()
        shape = tuple(int(d) for d in dims.split(","))
        ours = torch.from_numpy(np.fromfile(os.path.join(workdir, case + ".w"), dtype="<f8").reshape(shape))
        if kind == "orthogonal":
            gain = float(option)
            gauss = torch.from_numpy(np.fromfile(os.path.join(workdir, case + ".gauss"), dtype="<f8"))
            original = torch.Tensor.normal_

            def draw_tesseras_matrix(self, *args, **kwargs):
                with torch.no_grad():
                    self.copy_(gauss.reshape(self.shape))
                return self

            torch.Tensor.normal_ = draw_tesseras_matrix
            try:
                reference = torch.empty(shape, dtype=torch.float64)
                torch.nn.init.orthogonal_(reference, gain=gain)
            finally:
                torch.Tensor.normal_ = original
            error = (ours - reference).abs().max().item()
            ok = error <= 1e-12 * gain
            print(f"orthogonal {shape} gain {gain}: max |tessera - torch| = {error:.3e}", "ok" if ok else "FAIL")
        else:
            groups = int(option)
            reference = torch.empty(shape, dtype=torch.float64)
            if len(shape) == 2:
                torch.nn.init.eye_(reference)
            else:
                torch.nn.init.dirac_(reference, groups=groups)
            ok = torch.equal(ours, reference)
            print(f"dirac {shape} groups {groups}:", "equal" if ok else "FAIL")
        cases += 1
        failures += not ok
    if cases != 11:
        print(f"FAIL: {cases} cases in the manifest, expected 11")
        failures += 1
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
