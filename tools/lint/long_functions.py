#!/usr/bin/env python3
"""Lists C++ function bodies longer than a limit (default 80 lines), longest first.

The project's rule is no function over ~80 lines without a reason in a comment; a function that
keeps its length on purpose says so with a comment containing "long-function:" in the lines just
above its signature, and is then listed only with --all.

A brace matcher, not a parser: comments, string and character literals (raw strings included) are
blanked first; a body is a '{' whose statement head ends in ')' (optionally followed by const,
noexcept, override, a trailing return type or a constructor's initialiser list) at namespace or
class scope. Lambdas and local classes count towards the function that holds them.

  tools/lint/long_functions.py [--limit N] [--all] [PATH...]   (default PATH: the tree, minus
  third_party/, build*/ and the CUDA trees other work owns are not skipped: pass paths to narrow)
"""
import argparse
import os
import re
import sys

EXTS = ('.cpp', '.hpp', '.cc', '.h', '.cu', '.cuh')
SKIP_DIRS = {'third_party', '.git'}
SCOPE_WORDS = re.compile(r'\b(namespace|class|struct|union|enum)\b[^;()]*$')
WAIVER = 'long-function:'


def blank(text):
    """Comments and literals become spaces (newlines kept, so line numbers hold)."""
    out = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith('//', i):
            j = text.find('\n', i)
            j = n if j < 0 else j
            out.append(' ' * (j - i))
            i = j
        elif text.startswith('/*', i):
            j = text.find('*/', i + 2)
            j = n if j < 0 else j + 2
            out.append(re.sub(r'[^\n]', ' ', text[i:j]))
            i = j
        elif c == 'R' and text.startswith('R"', i) and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == '_')):
            m = re.match(r'R"([^()\\ ]{0,16})\(', text[i:])
            if not m:
                out.append(c)
                i += 1
                continue
            end = text.find(')' + m.group(1) + '"', i)
            j = n if end < 0 else end + len(m.group(1)) + 2
            out.append('""' + re.sub(r'[^\n]', ' ', text[i + 2:j]))
            i = j
        elif c in '"\'':
            j = i + 1
            while j < n and text[j] != c and text[j] != '\n':
                j += 2 if text[j] == '\\' else 1
            j = min(j + 1, n)
            out.append(c + ' ' * (j - i - 2) + c if j - i >= 2 else c)
            i = j
        else:
            out.append(c)
            i += 1
    return ''.join(out)


def is_function_head(head):
    head = head.strip()
    if not head or SCOPE_WORDS.search(head) or head.startswith('#'):
        return False
    if re.search(r'(^|[^\w])(if|for|while|switch|catch|do|else)\s*(\(|$)', head.split('\n')[-1].strip()):
        return False
    # A constructor's initialiser list: "X::X(...) : a_(1), b_{2}" ends in ')' or '}'.
    head = re.sub(r'\)\s*:\s*[\w:]+\s*[({].*$', ')', head, flags=re.S)
    head = re.sub(r'\s*->\s*[\w:<>,\s*&]+$', '', head)
    head = re.sub(r'(\s*\b(const|noexcept|override|final|mutable)\b)+$', '', head)
    return head.endswith(')') and '=' not in head.split('(')[0]


def functions(path):
    with open(path, encoding='utf-8', errors='replace') as f:
        raw = f.read()
    text = blank(raw)
    raw_lines = raw.split('\n')
    stack = []  # per open brace: (kind, start line, name) with kind 'scope', 'func' or 'other'
    head_start = 0
    for i, c in enumerate(text):
        if c == '{':
            head = text[head_start:i]
            in_func = any(k == 'func' for k, _, _ in stack)
            if not in_func and is_function_head(head):
                first = len(head) - len(head.lstrip())
                line = text.count('\n', 0, head_start + first) + 1
                name = re.sub(r'\s+', ' ', head.strip().split('(')[0].split()[-1] if head.strip() else '?')
                stack.append(('func', line, name))
            elif not in_func and SCOPE_WORDS.search(head.strip()):
                stack.append(('scope', 0, ''))
            else:
                stack.append(('other', 0, ''))
            head_start = i + 1
        elif c == '}':
            if stack:
                kind, line, name = stack.pop()
                if kind == 'func':
                    end = text.count('\n', 0, i) + 1
                    above = '\n'.join(raw_lines[max(0, line - 6):line])
                    yield name, line, end - line + 1, WAIVER in above
            head_start = i + 1
        elif c == ';':
            head_start = i + 1
        elif c == '\n' and text[head_start:i].lstrip().startswith('#'):
            head_start = i + 1  # a preprocessor line is not part of the next head


def walk(paths):
    for p in paths:
        if os.path.isfile(p):
            yield p
            continue
        for root, dirs, files in os.walk(p):
            dirs[:] = sorted(d for d in dirs if d not in SKIP_DIRS and not d.startswith('build'))
            for f in sorted(files):
                if f.endswith(EXTS):
                    yield os.path.join(root, f)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--limit', type=int, default=80)
    ap.add_argument('--all', action='store_true', help='also list functions with a long-function: comment')
    ap.add_argument('paths', nargs='*', default=['.'])
    args = ap.parse_args()
    found = []
    for path in walk(args.paths):
        for name, line, length, waived in functions(path):
            if length > args.limit and (args.all or not waived):
                found.append((length, path, line, name, waived))
    for length, path, line, name, waived in sorted(found, reverse=True):
        print(f'{length:5d}  {path}:{line}  {name}{"  (waived)" if waived else ""}')
    return 1 if any(not w for *_, w in found) else 0


if __name__ == '__main__':
    sys.exit(main())
