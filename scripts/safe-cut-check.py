#!/usr/bin/env python3
"""Checks `tokenizer::safe_cut`'s rule against Hugging Face's GPT-2 byte-level pre-tokenizer.

The rule: a text may be cut between a character that is neither whitespace nor a control
character and a whitespace character, and between two ASCII characters of different classes
(letters, digits, others) the first of which is not an apostrophe; the pieces then pre-tokenise
as the whole text does. For every such pair — (X, W) with X below U+3000, in U+FE00..U+FF0F or
U+1F300..U+1F6FF and W any whitespace Rust's `char::is_whitespace` takes; every ASCII pair — in
several contexts before and after, this compares the pre-tokens of the whole text with those of
its two pieces. Needs `pip install
tokenizers`; a few minutes. Prints the first differences and exits 1 if there are any.
"""
import sys

from tokenizers.pre_tokenizers import ByteLevel

pt = ByteLevel(add_prefix_space=False, use_regex=True)


def toks(s):
    return [p for p, _ in pt.pre_tokenize_str(s)]


# Unicode's White_Space, as Rust's char::is_whitespace.
WS = "\t\n\x0b\x0c\r \x85\xa0\u1680" + "".join(chr(c) for c in range(0x2000, 0x200B)) + "\u2028\u2029\u202f\u205f\u3000"


def control(c):
    return ord(c) < 0x20 or 0x7F <= ord(c) < 0xA0


def main():
    checked = 0
    bad = 0

    def check(before, x, y, after):
        """Cuts `before + x + y + after` between x and y; counts a difference."""
        nonlocal checked, bad
        t = before + x + y + after
        cut = len(before) + len(x)
        checked += 1
        if toks(t) != toks(t[:cut]) + toks(t[cut:]):
            bad += 1
            if bad <= 10:
                print("differs:", repr(before), repr(x), repr(y), repr(after))

    # A character that is neither whitespace nor a control character, then whitespace.
    ranges = list(range(0x20, 0x3000)) + list(range(0xFE00, 0xFF10)) + list(range(0x1F300, 0x1F700))
    solid = [chr(i) for i in ranges if chr(i) not in WS and not control(chr(i)) and not 0xD800 <= i < 0xE000]
    for x in solid:
        for w in WS:
            for after in ["", "x", "'s", " ", "\n", "1", "。", "\u3000他"]:
                for before in ["ab", "a'", " "]:
                    check(before, x, w, after)

    # Between ASCII letters, digits and other ASCII characters, the first not an apostrophe.
    def cls(c):
        return "L" if c.isalpha() else "N" if c.isdigit() else "O"

    graphic = [chr(i) for i in range(0x21, 0x7F)]
    for x in graphic:
        for y in graphic:
            if x == "'" or cls(x) == cls(y):
                continue
            for before in ["", "a", "1", "?", "'", "ab'", " ", "\n", "don", "é", "漢"]:
                for after in ["", "a", "1", "?", "s", "t", "re", "ll", "'", " x", "\n", "é", "漢", "'s"]:
                    check(before, x, y, after)
    print(f"{checked} cuts checked, {bad} differ")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
