"""Install size per extra: a fresh virtual environment per extra, the wheel built from this checkout, the size of
what lands in site-packages (pip itself subtracted) and whether Chroma came along.

    .venv/bin/python benchmarks/install_size.py                     # llama-index, langchain, and the Chroma extras
    .venv/bin/python benchmarks/install_size.py llama-index         # one extra

Needs the package registry (pip downloads the dependencies); nothing else leaves the machine.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_EXTRAS = ["llama-index", "langchain", "llama-index-chroma", "langchain-chroma"]


def _size(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file() and not p.is_symlink())


def measure(extra: str, wheel: Path, work: Path) -> tuple[float, bool, int]:
    env_dir = work / f"venv-{extra}"
    venv.EnvBuilder(with_pip=True).create(env_dir)
    python = env_dir / "bin" / "python"
    site = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               check=True, capture_output=True, text=True).stdout.strip())
    before = _size(site)
    subprocess.run([str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
                    f"{wheel}[{extra}]"], check=True)
    listed = subprocess.run([str(python), "-m", "pip", "list", "--format=freeze"], check=True, capture_output=True,
                            text=True).stdout.splitlines()
    chroma = any(line.lower().startswith("chromadb==") for line in listed)
    return (_size(site) - before) / 1e6, chroma, len(listed)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("extras", nargs="*", default=DEFAULT_EXTRAS)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        subprocess.run([sys.executable, "-m", "hatchling", "build", "-t", "wheel", "-d", str(work)], cwd=ROOT,
                       check=True, capture_output=True)
        (wheel,) = work.glob("*.whl")
        print("| extra | installed (MB) | packages | chromadb |")
        print("|---|---|---|---|")
        for extra in args.extras:
            megabytes, chroma, packages = measure(extra, wheel, work)
            print(f"| `[{extra}]` | {megabytes:.0f} | {packages} | {'yes' if chroma else 'no'} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
