#!/usr/bin/env python3
"""check_sizes.py: no source file over 500 lines, no function over 80 lines,
no folder with more than 20 sources side by side.

Scans every .cpp, .hpp, .cu (and .h, .cc, .cuh) file under ROOT except tests/,
build*/, hidden folders and CMake's build trees. Prints

    path:1: file is N lines (limit 500)
    path:line: function 'name' is N lines (limit 80)
    folder/: N sources side by side (limit 20)

and exits 1 when anything is over a limit.

    python3 scripts/check_sizes.py [--self-test] [--max-file-lines N]
                                   [--max-function-lines N]
                                   [--max-folder-sources N] [ROOT]

A source is a .cpp, .cu or .cc file (the units a reader opens to find
code); a folder past the limit is split into folders that say what they
hold (issue 56).

--self-test runs the scanner over the snippets embedded below and checks its
findings; given a ROOT too it then scans ROOT (the ctest entry `sizes` does
both, the self-test first).

What counts as a function. The text is first cleaned: comments, string and
character literals (raw strings included), preprocessor lines and number
literals (1'000 has no character literal in it) become blanks, so that only
code braces remain, on their original lines. Every `{` is then judged by the
tokens before it:

  * a function body: `)` closing a parameter list whose `(` follows a name
    (`f`, `a::b::f`, `~x`, `f<int>`, `operator()`, `operator==`), possibly
    followed by qualifiers (const, volatile, noexcept, noexcept(...),
    override, final, mutable, &, &&, try), a trailing return type
    (`-> T`), or a constructor's initializer list (`: a_(x), b_{y}`);
  * a lambda body: `]`, `](...)` or `]<class T>(...)` (with the same
    qualifiers and trailing return type allowed), reported as '<lambda>' or
    '<lambda v>' when it is assigned to `v`;
  * anything else is not a function: namespaces, classes, structs, unions,
    enums, braced initializers, try blocks, and control statements and
    requires-expressions (if, for, while, switch, catch, requires: their
    `(` follows a keyword).

A function's size is its body from the line of its opening brace to the line
of its closing brace, both included. Lambdas are counted on their own and also
as part of the function that holds them: a 100-line behavior of handlers is a
100-line function even when every handler is short. A function-like macro
followed by a brace (`FOO(x) {`) counts as a function named FOO.
"""
import argparse
import os
import re
import sys

EXTENSIONS = (".cpp", ".hpp", ".cu", ".h", ".cc", ".cuh")
EXCLUDED_TOP = {"tests"}
MAX_FILE_LINES = 500
MAX_FUNCTION_LINES = 80
MAX_FOLDER_SOURCES = 20
UNITS = (".cpp", ".cu", ".cc")

CONTROL = {"if", "for", "while", "switch", "catch", "constexpr", "return", "sizeof",
           "alignof", "alignas", "decltype", "noexcept", "requires", "static_assert",
           "__attribute__", "defined", "throw", "co_return", "co_await", "typeid"}
QUALIFIERS = {"const", "volatile", "noexcept", "override", "final", "mutable", "&",
              "&&", "try", "constexpr", "consteval", "static"}
OPERATOR_TOKENS = {"+", "-", "*", "/", "%", "^", "&", "|", "~", "!", "=", "<", ">",
                   "+=", "-=", "*=", "/=", "%=", "^=", "&=", "|=", "<<", ">>", ">>=",
                   "<<=", "==", "!=", "<=", ">=", "<=>", "&&", "||", "++", "--", ",",
                   "->*", "->", "()", "[]"}


# ---------------------------------------------------------------- cleaning --

def clean(text):
    """`text` with comments, literals and preprocessor lines blanked.

    Newlines are kept, so a position's line number is unchanged. Every other
    blanked character becomes a space; a string literal becomes `""` padded
    with spaces so that it still separates tokens."""
    out = []
    i, n = 0, len(text)
    line_start = True      # only whitespace so far on this line
    in_pp = False          # inside a preprocessor directive
    while i < n:
        c = text[i]
        nxt = text[i + 1] if i + 1 < n else ""
        if c == "\n":
            if in_pp and (i == 0 or text[i - 1] != "\\"):
                in_pp = False
            out.append("\n")
            line_start = True
            i += 1
            continue
        if c == "/" and nxt == "/":
            j = text.find("\n", i)
            j = n if j < 0 else j
            # A line comment ending in a backslash continues; rare, ignored.
            out.append(" " * (j - i))
            i = j
            continue
        if c == "/" and nxt == "*":
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(_blank(text[i:j]))
            i = j
            continue
        if in_pp:
            out.append(" ")
            i += 1
            continue
        if c == "#" and line_start:
            in_pp = True
            out.append(" ")
            i += 1
            continue
        if not c.isspace():
            line_start = False
        m = RAW_STRING.match(text, i)
        if m and (i == 0 or not _ident_char(text[i - 1])):
            end = text.find(")" + m.group(2) + '"', m.end())
            end = n if end < 0 else end + len(m.group(2)) + 2
            out.append(_literal(text[i:end]))
            i = end
            continue
        if c == '"' or (c == "'" and not _in_number(text, i)):
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            j = min(j + 1, n)
            out.append(_literal(text[i:j]))
            i = j
            continue
        if c.isdigit() and (i == 0 or not _ident_char(text[i - 1])):
            j = i
            while j < n and (_ident_char(text[j]) or text[j] in ".'" or
                             (text[j] in "+-" and text[j - 1] in "eEpP")):
                j += 1
            out.append("0" + " " * (j - i - 1))
            i = j
            continue
        out.append(c)
        i += 1
    return "".join(out)


RAW_STRING = re.compile(r'(u8|u|U|L)?R"([^ ()\\\t\n]{0,16})\(')


def _ident_char(c):
    return c.isalnum() or c == "_"


def _in_number(text, i):
    """Whether the `'` at i is a digit separator (1'000, 0xff'ff)."""
    j = i - 1
    while j >= 0 and (_ident_char(text[j]) or text[j] in "'."):
        j -= 1
    word = text[j + 1:i]
    return bool(word) and word[0].isdigit()


def _blank(s):
    return "".join("\n" if ch == "\n" else " " for ch in s)


def _literal(s):
    b = _blank(s)
    return '""' + b[2:] if len(s) >= 2 and "\n" not in s[:2] else b


# -------------------------------------------------------------- tokenizing --

TOKEN = re.compile(r"""
    (?P<ident>[A-Za-z_][A-Za-z0-9_]*)
  | (?P<num>[0-9][0-9A-Za-z_.]*)
  | (?P<punct>->\*|<=>|<<=|>>=|::|->|\+\+|--|<<|&&|\|\||[-+*/%^&|!=<>]=|""|\.\.\.|[^\sA-Za-z0-9_])
""", re.X)


def tokenize(cleaned):
    """(token, line) pairs; `>>` is two `>` (template closers)."""
    tokens = []
    line = 1
    pos = 0
    for m in TOKEN.finditer(cleaned):
        line += cleaned.count("\n", pos, m.start())
        pos = m.start()
        tokens.append((m.group(0), line))
    return tokens


# ---------------------------------------------------------------- scanning --

def find_functions(text):
    """[(name, first_line, line_count)] for every function and lambda body."""
    toks = tokenize(clean(text))
    words = [t for t, _ in toks]
    match = {}
    stack = []
    for k, w in enumerate(words):
        if w in "({[":
            stack.append(k)
        elif w in ")}]":
            # Unbalanced text (an #if with two heads) must not crash the scan.
            while stack and words[stack[-1]] != {")": "(", "}": "{", "]": "["}[w]:
                stack.pop()
            if stack:
                o = stack.pop()
                match[o] = k
                match[k] = o
    found = []
    for k, w in enumerate(words):
        if w != "{" or k not in match:
            continue
        name = function_name(words, k, match)
        if name is not None:
            first, last = toks[k][1], toks[match[k]][1]
            found.append((name, first, last - first + 1))
    return found


def function_name(words, k, match):
    """The name of the function or lambda whose body opens at words[k], or None."""
    j = _skip_trailing_return(words, k - 1, match)
    j = _skip_qualifiers(words, j, match)
    if j < 0:
        return None
    if words[j] == "]":
        return _lambda_name(words, match.get(j, j))
    if words[j] not in (")", "}"):
        return None
    # A constructor's initializer list: `) : a_(x), b_{y} {`.
    ctor = _skip_initializer_list(words, j, match)
    if ctor is not None:
        name = _name_before_parameters(words, ctor, match)
        if name is not None:
            return name
    if words[j] != ")":
        return None
    return _name_before_parameters(words, j, match)


def _skip_qualifiers(words, j, match):
    while j >= 0:
        if words[j] in QUALIFIERS:
            j -= 1
        elif words[j] == ")" and j in match and match[j] > 0 and \
                words[match[j] - 1] in ("noexcept", "throw", "requires"):
            j = match[j] - 2
        else:
            break
    return j


def _skip_trailing_return(words, j, match):
    """Index before `-> type` ending at j, or j when there is none."""
    k = j
    while k >= 0:
        w = words[k]
        if w == "->":
            return j if k >= 1 and words[k - 1] == "operator" else k - 1
        if w in (")", "]") and k in match:
            k = match[k] - 1
        elif w == ">":
            k = _skip_angles(words, k)
            if k is None:
                return j
        elif w in ("::", "*", "&", "&&", "...") or re.match(r"[A-Za-z_]", w):
            k -= 1
        else:
            return j
    return j


def _skip_angles(words, k):
    """Index before the `<` matching the `>` at k, or None."""
    depth = 0
    while k >= 0:
        w = words[k]
        if w == ">":
            depth += 1
        elif w == "<":
            depth -= 1
            if depth == 0:
                return k - 1
        elif w in (";", "{", "}"):
            return None
        k -= 1
    return None


def _skip_initializer_list(words, j, match):
    """The `)` of a constructor whose initializer list ends at words[j], or None."""
    k = j
    while True:
        if words[k] not in (")", "}") or k not in match:
            return None
        m = match[k] - 1
        if m >= 0 and words[m] == ">":          # base<T>(x)
            m = _skip_angles(words, m)
            if m is None:
                return None
        if m < 0 or not re.match(r"[A-Za-z_]", words[m]) or words[m] in CONTROL:
            return None
        while m >= 2 and words[m - 1] == "::" and re.match(r"[A-Za-z_]", words[m - 2]):
            m -= 2
        m -= 1
        if m >= 0 and words[m] == "...":
            m -= 1
        if m < 0:
            return None
        if words[m] == ",":
            k = m - 1
            continue
        if words[m] == ":":
            c = _skip_qualifiers(words, m - 1, match)
            return c if c >= 0 and words[c] == ")" else None
        return None


def _name_before_parameters(words, j, match):
    """The (qualified) name before the parameter list closing at words[j]."""
    if j not in match:
        return None
    p = match[j] - 1
    if p < 0:
        return None
    w = words[p]
    if w == "]" and p >= 2 and words[p - 1] == "[" and words[p - 2] == "operator":
        return _qualified(words, p - 2, "operator[]")
    if w == "]" and p in match:
        return _lambda_name(words, match[p])
    if w in CONTROL:
        return None
    if w == ")" and p in match and match[p] - 1 >= 0 and words[match[p] - 1] == "operator":
        return _qualified(words, match[p] - 1, "operator()")
    if p >= 1 and words[p - 1] == "operator" and w in OPERATOR_TOKENS | {'""'}:
        return _qualified(words, p - 1, "operator" + w)
    if w == ">":
        q = _skip_angles(words, p)
        if q is not None and q >= 0 and words[q] == "]" and q in match:
            return _lambda_name(words, match[q])  # a template lambda: []<class T>(...)
        if q is None or q < 0 or not re.match(r"[A-Za-z_]", words[q]):
            return None
        p = q
        w = words[p]
    if not re.match(r"[A-Za-z_]", w):
        return None
    return _qualified(words, p, w)


def _qualified(words, p, name):
    """`a::b::name` for the name at words[p], reading back over `x::`."""
    if p >= 1 and words[p - 1] == "~":
        name = "~" + name
        p -= 1
    while p >= 2 and words[p - 1] == "::" and re.match(r"[A-Za-z_]", words[p - 2]):
        name = words[p - 2] + "::" + name
        p -= 2
    return name


def _lambda_name(words, open_bracket):
    """'<lambda>', or '<lambda v>' for `v = [...]` / `auto v = [...]`."""
    b = open_bracket
    if b >= 1 and re.match(r"[A-Za-z_)\]]", words[b - 1]) and words[b - 1] not in CONTROL:
        return None  # a subscript, not a lambda introducer
    if b >= 2 and words[b - 1] == "=" and re.match(r"[A-Za-z_]", words[b - 2]):
        return "<lambda " + words[b - 2] + ">"
    return "<lambda>"


# ---------------------------------------------------------------- the tree --

def source_files(root):
    for d, dirs, names in os.walk(root):
        rel = os.path.relpath(d, root)
        if rel == ".":
            dirs[:] = [x for x in dirs if x not in EXCLUDED_TOP]
        dirs[:] = sorted(x for x in dirs if not x.startswith(".") and not x.startswith("build")
                         and not os.path.exists(os.path.join(d, x, "CMakeCache.txt")))
        for name in sorted(names):
            if name.endswith(EXTENSIONS):
                yield os.path.join(d, name)


def line_count(text):
    return text.count("\n") + (0 if text.endswith("\n") or not text else 1)


def check_text(rel, text, max_file, max_function):
    problems = []
    lines = line_count(text)
    if lines > max_file:
        problems.append(f"{rel}:1: file is {lines} lines (limit {max_file})")
    for name, first, count in find_functions(text):
        if count > max_function:
            problems.append(f"{rel}:{first}: function '{name}' is {count} lines "
                            f"(limit {max_function})")
    return problems


def check_folders(paths, max_sources):
    """Folders (relative paths) holding more than max_sources sources."""
    counts = {}
    for p in paths:
        if p.endswith(UNITS):
            d = os.path.dirname(p)
            counts[d] = counts.get(d, 0) + 1
    return [f"{d or '.'}/: {n} sources side by side (limit {max_sources})"
            for d, n in sorted(counts.items()) if n > max_sources]


def scan(root, max_file, max_function, max_folder=MAX_FOLDER_SOURCES):
    problems = []
    files = 0
    rels = []
    for path in source_files(root):
        files += 1
        rel = os.path.relpath(path, root)
        rels.append(rel)
        with open(path, encoding="utf-8", errors="replace") as f:
            text = f.read()
        problems += check_text(rel, text, max_file, max_function)
    return files, problems + check_folders(rels, max_folder)


# --------------------------------------------------------------- self-test --

def _body(n, indent="  "):
    """n - 2 lines of statements: with its braces a body of n lines."""
    return "".join(f"{indent}x += {i};\n" for i in range(n - 2))


def self_test():
    cases = []

    def case(title, text, expected):
        cases.append((title, text, expected))

    case("a long function and a short one",
         "namespace a {\nint f(int x) {\n" + _body(81) + "  return x;\n}\n"
         "int g() { return 1; }\n}  // namespace a\n",
         [("f", 2, 82)])
    case("exactly at the limit is fine",
         "void f() {\n" + _body(80) + "}\n", [])
    case("a long lambda inside a short-headed call",
         "void f() {\n  auto run = [&](int x) mutable -> int {\n" + _body(85, "    ") +
         "  };\n  run(1);\n}\n",
         [("f", 1, 88), ("<lambda run>", 2, 85)])
    case("a lambda without parameters passed as an argument",
         "void f() {\n  g(1, [] {\n" + _body(90, "    ") + "  });\n}\n",
         [("f", 1, 92), ("<lambda>", 2, 90)])
    case("a long class of short methods, a long namespace, enum and initializer",
         "namespace n {\nstruct s : base<int> {\n" +
         "".join(f"  int m{i}() const noexcept {{ return {i}; }}\n" for i in range(90)) +
         "};\nenum class e {\n" + "".join(f"  v{i},\n" for i in range(90)) + "};\n"
         "const int table[] = {\n" + "".join(f"  {i},\n" for i in range(90)) + "};\n}\n",
         [])
    case("braces in strings, characters, comments and raw strings",
         'void f() {\n  const char* a = "{{{";\n  char b = \'{\';\n  // {\n  /* { */\n'
         '  auto r = R"x(}\n}\n)" }\n)x";\n  int big = 1\'000\'000;\n  char c = \'}\';\n'
         + _body(79) + "}\nvoid g() {}\n",
         [("f", 1, 89)])
    case("control statements are not functions, their function is",
         "void f() {\n  for (int i = 0; i < 3; ++i) {\n" + _body(84, "    ") + "  }\n"
         "  if constexpr (true) {\n  }\n}\n",
         [("f", 1, 88)])
    case("a constructor with an initializer list, a destructor, an operator",
         "a::a(int x) noexcept : base<int>(x), b_{x}, c_(x) {\n" + _body(81) + "}\n"
         "a::~a() {\n" + _body(82) + "}\n"
         "bool a::operator==(const a& o) const {\n" + _body(83) + "}\n"
         "int a::operator()(int) {\n" + _body(84) + "}\n"
         "b* a::operator->() const {\n" + _body(85) + "}\n",
         [("a::a", 1, 81), ("a::~a", 82, 82), ("a::operator==", 164, 83),
          ("a::operator()", 247, 84), ("a::operator->", 331, 85)])
    case("a subscript operator and a template lambda",
         "struct t {\n  int& operator[](int i) {\n" + _body(81, "    ") + "  }\n};\n"
         "void f() {\n  g([&]<class T>(T x) {\n" + _body(81, "    ") + "  });\n}\n",
         [("operator[]", 2, 81), ("f", 84, 83), ("<lambda>", 85, 81)])
    case("requires-expressions are not functions",
         "template <class T>\n  requires requires(const T& x) {\n" +
         "".join(f"    x.m{i}();\n" for i in range(85)) + "  }\nvoid f(T) {}\n",
         [])
    case("a trailing return type and a template function",
         "template <class T>\nauto f(T t) -> std::pair<int, T> {\n" + _body(81) + "}\n",
         [("f", 2, 81)])
    case("preprocessor lines with braces are ignored",
         "#define X { {\n#define Y \\\n  }\nvoid f() {\n" + _body(81) + "}\n",
         [("f", 4, 81)])
    case("a class inside a function; a behavior of lambdas",
         "caf::behavior make() {\n  struct local { int x{1}; };\n  return {\n" +
         "".join(f"    [=](int{i}) {{ return {i}; }},\n" for i in range(90)) +
         "  };\n}\n",
         [("make", 1, 95)])

    failures = 0
    for title, text, expected in cases:
        got = [(n, l, c) for n, l, c in find_functions(text) if c > MAX_FUNCTION_LINES]
        if sorted(got) != sorted(expected):
            failures += 1
            print(f"self-test FAILED: {title}\n  expected {expected}\n  got      {got}")
    long_file = "int x;\n" * 501
    if check_text("f.cpp", long_file, MAX_FILE_LINES, MAX_FUNCTION_LINES) != \
            ["f.cpp:1: file is 501 lines (limit 500)"]:
        failures += 1
        print("self-test FAILED: a 501-line file")
    if check_text("f.cpp", "int x;\n" * 500, MAX_FILE_LINES, MAX_FUNCTION_LINES):
        failures += 1
        print("self-test FAILED: a 500-line file")
    crowded = [f"a/{i}.cpp" for i in range(21)] + [f"a/{i}.hpp" for i in range(30)] + \
        [f"a/b/{i}.cpp" for i in range(20)]
    if check_folders(crowded, MAX_FOLDER_SOURCES) != ["a/: 21 sources side by side (limit 20)"]:
        failures += 1
        print("self-test FAILED: a folder of 21 sources (and one of 20)")
    total = len(cases) + 3
    print(f"check_sizes self-test: {total - failures} of {total} cases pass")
    return failures == 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("root", nargs="?")
    ap.add_argument("--self-test", action="store_true")
    ap.add_argument("--max-file-lines", type=int, default=MAX_FILE_LINES)
    ap.add_argument("--max-function-lines", type=int, default=MAX_FUNCTION_LINES)
    ap.add_argument("--max-folder-sources", type=int, default=MAX_FOLDER_SOURCES)
    args = ap.parse_args()
    if args.self_test:
        if not self_test():
            return 1
        if args.root is None:
            return 0
    root = os.path.abspath(args.root or os.path.join(os.path.dirname(__file__), ".."))
    files, problems = scan(root, args.max_file_lines, args.max_function_lines,
                           args.max_folder_sources)
    for p in problems:
        print(p)
    print(f"check_sizes: {files} files, {len(problems)} over the limits")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
