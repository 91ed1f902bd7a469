"""Fill .whl/ with the wheels the lent GPU machine lacks, for benchmarks/gpu_check.sh.

    python benchmarks/gpu_check_wheels.py [--dest .whl]

The GPU machine (docs/gpu_check.md) has no network; its Python 3.12 already holds NumPy, CuPy,
PyTorch, onnxruntime, pytest, matplotlib, scikit-learn, ml_dtypes and threadpoolctl. What the
check needs beyond them is listed in WHEELS: mnist1d (the course's dependency) and nbval with the
notebook stack (ipykernel, jupyter_client, ...). Run this where pip reaches PyPI; the wheels are
downloaded without their dependencies (each one needed is named here), for CPython 3.12 on
x86-64 Linux, about 17 MB. .whl/ is git-ignored; the device call carries it.
"""
import argparse
import subprocess
import sys
from pathlib import Path

WHEELS = """mnist1d nbval nbclient nbformat fastjsonschema jsonschema jsonschema-specifications
referencing rpds-py ipykernel ipython ipython-pygments-lexers jedi parso pexpect ptyprocess
prompt-toolkit wcwidth stack-data executing asttokens pure-eval traitlets comm debugpy
matplotlib-inline nest-asyncio2 jupyter-client jupyter-core platformdirs pyzmq tornado
ipywidgets widgetsnbextension jupyterlab-widgets""".split()

PLATFORMS = ["manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_26_x86_64",
             "manylinux_2_17_x86_64", "manylinux2014_x86_64", "manylinux1_x86_64", "any"]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dest", default=str(Path(__file__).resolve().parents[1] / ".whl"))
    args = ap.parse_args(argv)
    cmd = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:",
           "--python-version", "3.12", "--implementation", "cp", "-d", args.dest]
    for platform in PLATFORMS:
        cmd += ["--platform", platform]
    return subprocess.call(cmd + WHEELS)


if __name__ == "__main__":
    sys.exit(main())
