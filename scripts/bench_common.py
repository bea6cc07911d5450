"""bench_common.py - what the pe-bench scripts (bench-compare.py,
bench-targets.py) share: the CPU's name and their aligned text tables."""
import platform


def cpu_name():
    """The CPU's model name as /proc/cpuinfo gives it."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def print_table(table, left=None):
    """Rows of cells (the first row the header, underlined), each column as
    wide as its widest cell; columns [0, left) aligned left, the rest right
    (left None: every column left)."""
    n = len(table[0])
    left = n if left is None else left
    widths = [max(len(str(row[c])) for row in table) for c in range(n)]
    for j, row in enumerate(table):
        cells = [str(v).ljust(widths[c]) if c < left else str(v).rjust(widths[c])
                 for c, v in enumerate(row)]
        print("  ".join(cells).rstrip())
        if j == 0:
            print("  ".join("-" * w for w in widths))


def option_value(argv, i, usage):
    """The value of option argv[i] (argv[i + 1]); usage(message) when it has none."""
    if i + 1 >= len(argv):
        usage(f"{argv[i]} needs a value")
    return argv[i + 1]


def positive_int(opt, key, usage):
    """opt[key] (option --key) as an int of at least 1; usage(message) otherwise."""
    try:
        opt[key] = int(opt[key])
    except ValueError:
        usage(f"--{key} {opt[key]} is not a number")
    if opt[key] < 1:
        usage(f"--{key} {opt[key]} must be at least 1")
