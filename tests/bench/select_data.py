#!/usr/bin/env python3
"""The data of tests/bench/select.sh, from the demo text, deterministically.

Writes into OUT: eval.txt (the text's last tenth), holdout.txt (the tenth
before it: what a reference model may learn from), and train.txt: the
first eight tenths, clean, mixed in 2 KiB blocks with three kinds of
harmful data of about 60 KiB each: the clean text's bytes shuffled (its
byte frequencies without its structure), one 2 KiB passage repeated
(exact duplicates), and one low-value sentence repeated.

usage: select_data.py DEMO_TEXT OUT
"""
import random
import sys

BLOCK = 2048


def main():
    text = open(sys.argv[1], "rb").read()
    out = sys.argv[2]
    n = len(text)
    clean, holdout, evals = text[: n * 8 // 10], text[n * 8 // 10 : n * 9 // 10], text[n * 9 // 10 :]
    rng = random.Random(20261204)
    shuffled = bytearray(clean[: 60 * 1024])
    rng.shuffle(shuffled)
    passage = clean[BLOCK * 10 : BLOCK * 11]
    duplicates = passage * (60 * 1024 // BLOCK)
    sentence = b"Thank you for reading this sentence, which says nothing new. "
    repeated = (sentence * (60 * 1024 // len(sentence) + 1))[: 60 * 1024]
    blocks = []
    for src in (clean, bytes(shuffled), duplicates, repeated):
        blocks += [src[i : i + BLOCK] for i in range(0, len(src) - BLOCK + 1, BLOCK)]
    rng.shuffle(blocks)
    with open(f"{out}/train.txt", "wb") as f:
        f.write(b"".join(blocks))
    with open(f"{out}/holdout.txt", "wb") as f:
        f.write(holdout)
    with open(f"{out}/eval.txt", "wb") as f:
        f.write(evals)
    kinds = {"clean": len(clean) // BLOCK, "shuffled": len(shuffled) // BLOCK, "duplicates": len(duplicates) // BLOCK,
             "sentence": len(repeated) // BLOCK}
    print("select_data: train %d bytes in %d blocks (%s), holdout %d, eval %d" % (
        sum(map(len, blocks)), len(blocks), ", ".join(f"{k} {v}" for k, v in kinds.items()), len(holdout), len(evals)))


if __name__ == "__main__":
    main()
