#!/usr/bin/env python3
# Output generator for run_output.sh: writes MIB MiB of 100-byte lines
# "RANK SEQ xxx..." to stdout (HOROVOD_RANK from hvactor-run's environment).
import os
import sys

rank = os.environ.get("HOROVOD_RANK", "0").encode()
mib = int(sys.argv[1]) if len(sys.argv) > 1 else 200
lines = mib * 1048576 // 100
pad = b"x" * (100 - len(rank) - 12)
out = sys.stdout.buffer
for start in range(0, lines, 1000):
    out.write(b"".join(b"%s %09d %s\n" % (rank, i, pad) for i in range(start, min(start + 1000, lines))))
out.flush()
