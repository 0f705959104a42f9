#!/usr/bin/env python3
"""check_screenshot.py VIEWER RUN_DIR OUT.png

Takes a headless screenshot of RUN_DIR with the viewer under Xvfb and checks the picture: the PNG
exists at the requested size, is not blank, and shows the lane colours of compute kernels (blue)
and communication (orange). The PNG is decoded with zlib alone, so no imaging library is needed.
"""
import os
import struct
import subprocess
import sys
import zlib

WIDTH, HEIGHT = 1280, 720
COMPUTE_BLUE = (66, 133, 244)  # viewer/app/app.cpp category_color
COMM_ORANGE = (245, 140, 30)
CPU_OP_GREY = (200, 200, 200)
ANNOTATION_PURPLE = (150, 100, 210)


def read_png(path):
    """Returns (width, height, rows of (r, g, b) tuples) of an 8-bit RGB or RGBA PNG."""
    with open(path, "rb") as f:
        data = f.read()
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        sys.exit(f"{path}: not a PNG")
    pos, idat = 8, b""
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + length]
        if kind == b"IHDR":
            width, height, depth, color, _, _, interlace = struct.unpack(">IIBBBBB", body)
            if depth != 8 or color not in (2, 6) or interlace:
                sys.exit(f"{path}: expected 8-bit RGB(A), non-interlaced")
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    channels = 3 if color == 2 else 4
    raw = zlib.decompress(idat)
    stride = width * channels
    rows, prev = [], bytearray(stride)
    for y in range(height):
        start = y * (stride + 1)
        kind, line = raw[start], bytearray(raw[start + 1:start + 1 + stride])
        for i in range(stride):  # undo the PNG filter of this row
            a = line[i - channels] if i >= channels else 0
            b, c = prev[i], prev[i - channels] if i >= channels else 0
            if kind == 1:
                line[i] = (line[i] + a) & 255
            elif kind == 2:
                line[i] = (line[i] + b) & 255
            elif kind == 3:
                line[i] = (line[i] + (a + b) // 2) & 255
            elif kind == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        rows.append([tuple(line[x * channels:x * channels + 3]) for x in range(width)])
        prev = line
    return width, height, rows


# What a GPU run's picture must show: compute and communication kernels. A CPU-only run (PyTorch
# on gloo, no kernels) shows CPU ops and annotations instead.
GPU_LANES = (("compute-blue", COMPUTE_BLUE, 2000), ("comm-orange", COMM_ORANGE, 500))
CPU_LANES = (("cpu-op grey", CPU_OP_GREY, 2000), ("annotation purple", ANNOTATION_PURPLE, 2000))


def picture_problem(path, want_width, want_height, lanes=GPU_LANES):
    """What is wrong with a viewer screenshot (None when nothing): its size, a blank picture, too
    few pixels of the lanes' colours."""
    width, height, rows = read_png(path)
    if (width, height) != (want_width, want_height):
        return f"screenshot is {width}x{height}, expected {want_width}x{want_height}"
    counts = {}
    for row in rows:
        for px in row:
            counts[px] = counts.get(px, 0) + 1
    print(f"{len(counts)} distinct colours")
    if len(counts) < 50:
        return f"the screenshot looks blank: {len(counts)} distinct colours"

    def near(target, tolerance=24):
        return sum(n for px, n in counts.items() if all(abs(p - t) <= tolerance for p, t in zip(px, target)))

    for name, colour, least in lanes:
        n = near(colour)
        print(f"{name} pixels: {n}")
        if n < least:
            return f"too few {name} pixels: are those slices drawn?"
    return None


def main():
    viewer, run_dir, out = sys.argv[1:4]
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    if os.path.exists(out):
        os.remove(out)
    cmd = ["xvfb-run", "-a", "-s", "-screen 0 1920x1080x24", viewer, run_dir, "--screenshot", out,
           "--size", f"{WIDTH}x{HEIGHT}"]
    print(" ".join(cmd))
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    print(result.stdout, result.stderr)
    if result.returncode != 0:
        sys.exit(f"the viewer exited with {result.returncode}")
    if not os.path.exists(out):
        sys.exit(f"no screenshot at {out}")

    problem = picture_problem(out, WIDTH, HEIGHT)
    if problem:
        sys.exit(problem)
    print("screenshot ok")


if __name__ == "__main__":
    main()
