#!/usr/bin/env python3
"""Writes xxh3_vectors.txt beside this file: XXH3-64 (seed 0) of inputs of
every length class the algorithm treats differently (0, 1-3, 4-8, 9-16,
17-128, 129-240, and longer, past a 1 KiB stripe block), computed by
Python's `xxhash` package (the reference library's bindings). KeyHashTest
checks the Java hash against them. Inputs are a fixed byte pattern, so the
file is reproducible: python3 gen_xxh3_vectors.py"""
import os
import xxhash

LENGTHS = [0, 1, 2, 3, 4, 7, 8, 9, 15, 16, 17, 31, 64, 100, 128, 129, 200, 240, 241, 255, 1000, 1024, 1025, 4096, 5000]


def pattern(n):
    return bytes((i * 31 + 7) % 251 for i in range(n))


here = os.path.dirname(os.path.abspath(__file__))
with open(os.path.join(here, "xxh3_vectors.txt"), "w") as f:
    f.write("# length xxh3_64(pattern(length)) -- pattern(i) = (i*31+7) % 251; made by gen_xxh3_vectors.py\n")
    for n in LENGTHS:
        f.write(f"{n} {xxhash.xxh3_64_intdigest(pattern(n)):016x}\n")
