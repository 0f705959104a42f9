#!/usr/bin/env python3
"""check_readme_screenshot.py VIEWER README.md OUT.png [PICTURE [--cpu-trace]]

A README shows a viewer screenshot, `![...](PICTURE)` (a chapter's: viewer.png, the default),
with the command that made it in italics right under it:

    *`xvfb-run -a build/viewer/shardlab-view traces/... --range T0:T1 --size WxH
    --screenshot runs/screenshots/<chapter>.png` (from the repository root...): what to look at.*

This reruns that command as written, from the repository root (the README's directory or the
first above it holding traces/), with VIEWER in place of build/viewer/shardlab-view and OUT.png
in place of the README's picture, and checks the result as check_screenshot.py does: the size
--size asks for, not blank, the compute-blue and comm-orange lane colours (the colours of the
work the picture shows: a CPU-only PyTorch trace has no kernels, so there it is the CPU ops'
grey and the annotations' purple). So the README's command stays valid: a flag renamed, a trace
moved or a viewer that draws nothing fails here (--cpu-trace: the picture is of a CPU-only run). The
command writes under runs/, never over the picture the README shows (which is a copy of what it
wrote, at the size --size asks for).
"""
import os
import re
import shlex
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from check_screenshot import CPU_LANES, GPU_LANES, picture_problem, png_size  # noqa: E402


def fail(message):
    sys.exit(f"FAIL  {message}")


def readme_command(readme, picture):
    text = open(readme, encoding="utf-8").read()
    m = re.search(r"!\[[^\]]*\]\(" + re.escape(picture) + r"\)\s*\n\s*\*`([^`]*)`", text)
    if not m:
        fail(f"{readme}: no ![...]({picture}) with its command in italics under it")
    return shlex.split(" ".join(m.group(1).split()))


def repository_root(readme_dir):
    d = readme_dir
    while not os.path.isdir(os.path.join(d, "traces")):
        if os.path.dirname(d) == d:
            fail(f"no repository root (a directory holding traces/) above {readme_dir}")
        d = os.path.dirname(d)
    return d


def main():
    viewer, readme, out = sys.argv[1:4]
    shown = sys.argv[4] if len(sys.argv) > 4 else "viewer.png"
    lanes = CPU_LANES if "--cpu-trace" in sys.argv[5:] else GPU_LANES
    readme = os.path.abspath(readme)
    readme_dir = os.path.dirname(readme)
    root = repository_root(readme_dir)
    picture = os.path.relpath(os.path.join(readme_dir, shown), root)
    args = readme_command(readme, shown)
    print("README: " + " ".join(args))
    if args[:3] != ["xvfb-run", "-a", "build/viewer/shardlab-view"]:
        fail(f"the command should start with `xvfb-run -a build/viewer/shardlab-view`: {args[:3]}")
    for flag in ("--screenshot", "--size", "--range"):
        if flag not in args or args.index(flag) + 1 >= len(args):
            fail(f"the command has no {flag} VALUE")
    shot = args.index("--screenshot") + 1
    # A reader who runs the command must not overwrite the picture in the repository: the command
    # writes under runs/ (ignored by git), and the README's picture is a copy of what it wrote.
    if not args[shot].startswith("runs/") or os.path.splitext(args[shot])[1] != ".png":
        fail(f"the command writes {args[shot]}: a README's screenshot command writes a .png under runs/, "
             f"never over the picture it shows ({picture})")
    width, height = (int(v) for v in args[args.index("--size") + 1].split("x"))

    # The README's picture is what the command makes: at least its size.
    w, h = png_size(os.path.join(root, picture))
    if (w, h) != (width, height):
        fail(f"{picture} is {w}x{h}, the command asks for {width}x{height}: regenerate it")

    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    if os.path.exists(out):
        os.remove(out)
    cmd = args[:2] + [viewer] + args[3:shot] + [os.path.abspath(out)] + args[shot + 1:]
    print(f"(in {root}) " + " ".join(cmd))
    result = subprocess.run(cmd, cwd=root, capture_output=True, text=True, timeout=120)
    print(result.stdout + result.stderr, end="")
    if result.returncode != 0:
        fail(f"the README's command exited with {result.returncode}")
    if not os.path.exists(out):
        fail(f"no screenshot at {out}")

    # The checks of check_screenshot.py, at the README's size.
    problem = picture_problem(out, width, height, lanes)
    if problem:
        fail(problem)
    same = open(out, "rb").read() == open(os.path.join(root, picture), "rb").read()
    print(f"(the picture is {'identical to' if same else 'not byte for byte'} {picture}"
          f"{'' if same else ': another renderer or font, or the viewer changed its looks; regenerate it if so'})")
    print(f"{os.path.relpath(readme, root)}: the screenshot command works")


if __name__ == "__main__":
    main()
