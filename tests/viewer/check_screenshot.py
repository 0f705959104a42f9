#!/usr/bin/env python3
"""check_screenshot.py VIEWER RUN_DIR OUT.png

Takes a headless screenshot of RUN_DIR with the viewer under Xvfb and checks the picture: the PNG
exists at the requested size, is not blank, and shows the lane colours of compute kernels (blue)
and communication (orange). The PNG is decoded with zlib alone, so no imaging library is needed.
"""
import collections
import itertools
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


def png_chunks(path):
    """(kind, body) of each chunk of a PNG file."""
    with open(path, "rb") as f:
        data = f.read()
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        sys.exit(f"{path}: not a PNG")
    pos = 8
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        yield kind, data[pos + 8:pos + 8 + length]
        pos += 12 + length


def png_size(path):
    """(width, height) of a PNG, from its header alone."""
    for kind, body in png_chunks(path):
        if kind == b"IHDR":
            return struct.unpack(">II", body[:8])
    sys.exit(f"{path}: a PNG without its IHDR")


def unfilter(kind, line, prev, bpp, masks):
    """A row with its PNG filter undone (prev: the row above, undone; bpp: bytes per pixel;
    masks: a row of 0x7f bytes and one of 0x80 as integers). Python's loops are slow, so the
    common cases are cheap: an Up row is one integer sum, and Paeth needs its three distances
    only where the neighbours differ."""
    n = len(line)
    if kind == 0:
        return line
    if kind == 2:  # Up: byte-wise (line + prev) mod 256 on the whole row as one integer
        x, y = int.from_bytes(line, "little"), int.from_bytes(prev, "little")
        low, high = masks
        return bytearray((((x & low) + (y & low)) ^ ((x ^ y) & high)).to_bytes(n, "little"))
    if kind == 1:
        for i in range(bpp, n):
            line[i] = (line[i] + line[i - bpp]) & 255
    elif kind == 3:
        for i in range(bpp):
            line[i] = (line[i] + (prev[i] >> 1)) & 255
        for i in range(bpp, n):
            line[i] = (line[i] + ((line[i - bpp] + prev[i]) >> 1)) & 255
    elif kind == 4:
        for i in range(bpp):
            line[i] = (line[i] + prev[i]) & 255
        for i in range(bpp, n):
            a, b, c = line[i - bpp], prev[i], prev[i - bpp]
            if b == c:  # Paeth's predictor is a (|p - a| is 0): flat areas, most of a screenshot
                line[i] = (line[i] + a) & 255
            elif a == c:  # b (|p - b| is 0, |p - a| is not)
                line[i] = (line[i] + b) & 255
            else:
                pa, pb, pc = abs(b - c), abs(a - c), abs(a + b - 2 * c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
    return line


def read_png(path):
    """Returns (width, height, rows of (r, g, b) tuples) of an 8-bit RGB or RGBA PNG."""
    header, idat = None, []
    for kind, body in png_chunks(path):
        if kind == b"IHDR":
            header = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat.append(body)
    if header is None:
        sys.exit(f"{path}: a PNG without its IHDR")
    width, height, depth, color, _, _, interlace = header
    if depth != 8 or color not in (2, 6) or interlace:
        sys.exit(f"{path}: expected 8-bit RGB(A), non-interlaced")
    channels = 3 if color == 2 else 4
    raw = zlib.decompress(b"".join(idat))
    stride = width * channels
    rows, prev = [], bytearray(stride)
    masks = tuple(int.from_bytes(byte * stride, "little") for byte in (b"\x7f", b"\x80"))
    for y in range(height):
        start = y * (stride + 1)
        line = unfilter(raw[start], bytearray(raw[start + 1:start + 1 + stride]), prev, channels, masks)
        rows.append(list(zip(line[0::channels], line[1::channels], line[2::channels])))
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
    counts = collections.Counter(itertools.chain.from_iterable(rows))
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
