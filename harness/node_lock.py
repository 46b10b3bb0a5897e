"""SkyRL's own uv.lock against what the node adds, checked before anything is installed.

    python -m harness.node_lock check                  # make dry-run: against the committed export (sky/)
    python -m harness.node_lock check-checkout ~/skyrl # the node, right after checkout, before `uv sync`
    python -m harness.node_lock export ~/skyrl --source "NovaSky-AI/SkyRL@<sha> (<what>, <date>)"  # refresh sky/

`uv sync --extra fsdp` on the node installs exactly what SkyRL's uv.lock holds, and
scripts/node_setup.sh then installs sky/requirements-node.txt with `-c` on those packages. A
requirement that needs a newer version than the lock holds (daytona 0.224.0 needs pydantic
>= 2.13.5, SkyRL's lock of 2026-08-20 holds 2.13.4) therefore fails on the node only after the
tens-of-GB sync. Here the lock is exported (`uv export --frozen --extra fsdp`: no resolution,
the lock's own versions) and the node requirements are compiled against it for the node's
platform, outside the checkout and with --no-config, so a misfit costs seconds.

The lock of the pinned release (harness.node_env.SKYRL_REF) cannot be read from this machine
(no GitHub, and the PyPI sdist does not ship uv.lock), so `make dry-run` checks against the
committed export of the newest SkyRL lock that could be read (its header names the commit and
the sha256 of the uv.lock and pyproject.toml it came from), and says so; the node checks the
release's own lock. Standard library only: it runs on the node before SkyRL's env exists.
"""

from __future__ import annotations

import argparse
import hashlib
import re
import subprocess
import sys
import tempfile
from pathlib import Path

from harness.files import WORK_DIR, atomic_write_text
from harness.node_env import (NODE_REQUIREMENTS, PLATFORM, PYTHON_VERSION, UV_VERSION, NodeEnvError, find_uv,
                              read_pins, uv_compile, uv_reason)

LOCK_EXPORT = NODE_REQUIREMENTS.parent / "skyrl-fsdp-lock.txt"  # committed; refresh with `export`
EXPORT_ARGS = ("export", "--frozen", "--extra", "fsdp", "--no-hashes", "--no-emit-project", "--no-emit-local",
               "--no-annotate", "--no-header", "--no-config")
SHOWN = ("pydantic", "urllib3", "httpx")  # what the lock pins that Daytona's SDK clients care about


def _sha256(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def export_lock(uv: str, skyrl_dir: Path, out: Path, source: str) -> Path:
    """`uv export --frozen --extra fsdp` of a SkyRL checkout into `out`, headed by its source and sha256s."""
    skyrl_dir = Path(skyrl_dir)
    missing = [name for name in ("uv.lock", "pyproject.toml") if not (skyrl_dir / name).is_file()]
    if missing:
        raise NodeEnvError(f"{skyrl_dir} has no {' or '.join(missing)}: not a SkyRL checkout with a lock")
    with tempfile.TemporaryDirectory() as tmp:
        target = Path(tmp) / "export.txt"
        proc = subprocess.run([uv, *EXPORT_ARGS, "-o", str(target)], cwd=skyrl_dir, capture_output=True, text=True,
                              timeout=300)
        if proc.returncode != 0:
            raise NodeEnvError(f"uv export --frozen --extra fsdp failed in {skyrl_dir}: {uv_reason(proc.stderr)}")
        body = target.read_text()
    atomic_write_text(out, f"# SkyRL's fsdp env as its uv.lock pins it: uv {UV_VERSION} {' '.join(EXPORT_ARGS)}\n"
                           f"# source: {source}\n"
                           f"# sha256: uv.lock {_sha256(skyrl_dir / 'uv.lock')}; pyproject.toml "
                           f"{_sha256(skyrl_dir / 'pyproject.toml')}\n" + body)
    return Path(out)


def export_source(export: Path) -> str:
    """The `# source:` line of an export (what lock it is)."""
    match = re.search(r"^# source: (.+)$", Path(export).read_text(), re.M)
    if not match:
        raise NodeEnvError(f"{export} has no '# source:' line: regenerate it with `python -m harness.node_lock export`")
    return match.group(1)


def compile_against_lock(uv: str, requirements: Path, export: Path, out: Path) -> dict[str, str]:
    """The node requirements compiled with `-c export` for the node's platform; NodeEnvError with uv's reason."""
    uv_compile(uv, [str(requirements), "-c", str(export), "--no-config"], out,
               f"{Path(requirements).name} against SkyRL's lock ({export_source(export)})")
    return read_pins(out)


def summary(requirements: Path, export: Path, resolved: dict[str, str]) -> str:
    lock = read_pins(export)
    ours = [name for name in read_pins(requirements)]
    return (f"lock ok: {Path(requirements).name} ({', '.join(f'{n} {resolved[n]}' for n in ours)}) fits the uv.lock of "
            f"{export_source(export)} ({', '.join(f'{n} {lock[n]}' for n in SHOWN if n in lock)}), "
            f"{PLATFORM} / Python {PYTHON_VERSION}")


def check_committed(requirements: Path, export: Path, out_dir: Path, uv: str) -> str:
    """make dry-run: the node requirements against the committed export, said to be what it is."""
    if not Path(export).is_file():
        return (f"lock not checked: no {Path(export).name} to read here, so the node requirements are checked "
                "against PyPI only (node env); the node checks SkyRL's own lock before uv sync")
    resolved = compile_against_lock(uv, requirements, export, Path(out_dir) / "node-lock-compiled.txt")
    return (summary(requirements, export, resolved) + "; not the pinned release's own lock (unreadable here): "
            "the node checks that one before uv sync")


def check_checkout_lock(skyrl_dir: Path, requirements: Path, out_dir: Path, uv: str) -> str:
    """The node: export the checkout's lock, compile the node requirements against it."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    head = subprocess.run(["git", "-C", str(skyrl_dir), "rev-parse", "HEAD"], capture_output=True, text=True)
    source = f"the checkout {skyrl_dir} at {head.stdout.strip() or 'an unknown commit'}"
    export = export_lock(uv, skyrl_dir, out_dir / "skyrl-fsdp-lock.txt", source)
    resolved = compile_against_lock(uv, requirements, export, out_dir / "node-lock-compiled.txt")
    return summary(requirements, export, resolved)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m harness.node_lock", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    check = sub.add_parser("check", help="make dry-run: the node requirements against the committed lock export")
    check.add_argument("--export", type=Path, default=LOCK_EXPORT)
    check.add_argument("--out", type=Path, default=WORK_DIR / "node-lock")
    check.add_argument("--requirements", type=Path, default=NODE_REQUIREMENTS)
    checkout = sub.add_parser("check-checkout", help="the node: a SkyRL checkout's own lock, before uv sync")
    checkout.add_argument("skyrl_dir", type=Path)
    checkout.add_argument("--out", type=Path, default=WORK_DIR / "node")
    checkout.add_argument("--requirements", type=Path, default=NODE_REQUIREMENTS)
    export = sub.add_parser("export", help="write a SkyRL checkout's lock export (refreshes sky/skyrl-fsdp-lock.txt)")
    export.add_argument("skyrl_dir", type=Path)
    export.add_argument("--source", required=True, help="what the checkout is: repo@commit (branch or tag, date)")
    export.add_argument("--out", type=Path, default=LOCK_EXPORT)
    args = parser.parse_args(argv)
    try:
        uv = find_uv()
        if args.command == "check":
            args.out.mkdir(parents=True, exist_ok=True)
            print(check_committed(args.requirements, args.export, args.out, uv))
        elif args.command == "check-checkout":
            print(check_checkout_lock(args.skyrl_dir.expanduser(), args.requirements, args.out, uv))
        else:
            print(f"wrote {export_lock(uv, args.skyrl_dir.expanduser(), args.out, args.source)}")
    except NodeEnvError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
