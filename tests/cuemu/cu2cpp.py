#!/usr/bin/env python3
"""cu2cpp.py SRC DST: rewrite a CUDA source (.cu or .cuh) into host C++ for the emulator
(tests/cuemu, docs/cuemu.md). Only what C++ cannot say is rewritten; every line keeps its number and
a #line directive names SRC, so compiler messages and __FILE__ / __LINE__ point at the original.

  k<<<g, b[, shmem[, stream]]>>>(args)  ->  cuemu_launch("k", __FILE__, __LINE__, k, g, b, shmem, stream)(args)
  extern __shared__ T name[];           ->  T *name = (T *)cuemu_dyn_shared();
  __shared__ T a[N], b;                 ->  static T a[N], b; CUEMU_SHARED(a); CUEMU_SHARED(b);
  #pragma unroll [n]                    ->  (an empty line)
  __launch_bounds__(n[, m]) k(...) {    ->  k(...) { cuemu_launch_bounds(n, __FILE__, __LINE__);
  asm volatile("ptx" : "=f"(d) : "r"(a));  ->  cuemu_asm("ptx", __FILE__, __LINE__, {cuemu_asm_out_f(&(d))},
                                                   {cuemu_asm_in_r(a)})  (the emulator runs the instructions it knows)

Comments and literals are left alone. Anything the rewrite cannot place (a __shared__ variable
outside a function, an unterminated launch) is an error naming SRC:line.
"""
import re
import sys


def blank(src):
    """src with comments and string / character literals replaced by spaces (newlines kept), so
    that patterns are only found in code; positions are those of src."""
    out = list(src)
    i, n = 0, len(src)
    while i < n:
        c = src[i]
        if src.startswith("//", i):
            j = src.find("\n", i)
            j = n if j < 0 else j
        elif src.startswith("/*", i):
            j = src.find("*/", i + 2)
            j = n if j < 0 else j + 2
        elif c in "\"'":
            j = i + 1
            while j < n and src[j] != c:
                j += 2 if src[j] == "\\" else 1
            j += 1
            for k in range(i + 1, min(j - 1, n)):
                if out[k] != "\n":
                    out[k] = " "
            i = j
            continue
        else:
            i += 1
            continue
        for k in range(i, j):
            if out[k] != "\n":
                out[k] = " "
        i = j
    return "".join(out)


class RewriteError(Exception):
    pass


def line_of(text, pos):
    return text.count("\n", 0, pos) + 1


def split_top(text):
    """Split on commas outside (), [], {}."""
    parts, depth, start = [], 0, 0
    for i, c in enumerate(text):
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
        elif c == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return parts


def kernel_start(code, pos):
    """Start of the kernel expression that ends just before pos (`name` or `name<args>`)."""
    i = pos
    while i > 0 and code[i - 1].isspace():
        i -= 1
    if i > 0 and code[i - 1] == ">":
        depth = 0
        while i > 0:
            i -= 1
            if code[i] == ">":
                depth += 1
            elif code[i] == "<":
                depth -= 1
                if depth == 0:
                    break
        while i > 0 and code[i - 1].isspace():
            i -= 1
    j = i
    while j > 0 and (code[j - 1].isalnum() or code[j - 1] in "_:"):
        j -= 1
    return j


def launches(src, code, path, edits):
    for m in re.finditer(r"<<<", code):
        start = kernel_start(code, m.start())
        kernel = src[start:m.start()].strip()
        if not kernel:
            raise RewriteError(f"{path}:{line_of(code, m.start())}: launch without a kernel name")
        depth, i, end = 0, m.end(), None
        while i < len(code):
            if code[i] in "([{":
                depth += 1
            elif code[i] in ")]}":
                depth -= 1
            elif depth == 0 and code.startswith(">>>", i):
                end = i
                break
            i += 1
        if end is None:
            raise RewriteError(f"{path}:{line_of(code, m.start())}: <<< without >>>")
        cfg = split_top(src[m.end():end])
        if not 2 <= len(cfg) <= 4:
            raise RewriteError(f"{path}:{line_of(code, m.start())}: a launch takes 2 to 4 parameters, not {len(cfg)}")
        cfg += [" 0"] * (4 - len(cfg))
        name = re.sub(r"\s+", "", kernel)
        text = f'cuemu_launch("{name}", __FILE__, __LINE__, {kernel}, ' + ",".join(c for c in cfg).lstrip() + ")"
        edits.append((start, end + 3, text))


def brace_depths(code):
    depth, out = 0, []
    for c in code:
        out.append(depth)
        if c == "{":
            depth += 1
        elif c == "}":
            depth -= 1
    return out


def declarator_name(part, first):
    """The variable a declarator declares: in the first part of `T a[N]`, the last identifier
    before any [ or =; in later parts, the first identifier."""
    head = re.split(r"[\[=]", part, maxsplit=1)[0]
    names = re.findall(r"[A-Za-z_]\w*", head)
    if not names:
        return None
    return names[-1] if first else names[0]


def shared(src, code, path, edits):
    depths = None
    for m in re.finditer(r"\b(extern\s+)?__shared__\b", code):
        semi = code.find(";", m.end())
        if semi < 0:
            raise RewriteError(f"{path}:{line_of(code, m.start())}: __shared__ declaration without ;")
        decl = src[m.end():semi]
        decl_nolign = re.sub(r"__align__\s*\([^)]*\)", "", decl)
        if m.group(1):  # extern __shared__ T name[];
            d = re.fullmatch(r"\s*(.*?)\s*\b([A-Za-z_]\w*)\s*\[\s*\]\s*", decl_nolign, re.S)
            if not d:
                raise RewriteError(f"{path}:{line_of(code, m.start())}: cannot read extern __shared__ {decl.strip()}")
            t, name = d.group(1), d.group(2)
            edits.append((m.start(), semi + 1, f"{t} *{name} = ({t} *)cuemu_dyn_shared();"))
            continue
        if depths is None:
            depths = brace_depths(code)
        if depths[m.start()] == 0:
            raise RewriteError(f"{path}:{line_of(code, m.start())}: __shared__ outside a function is not emulated")
        parts = split_top(decl_nolign)
        names = [declarator_name(p, i == 0) for i, p in enumerate(parts)]
        if None in names:
            raise RewriteError(f"{path}:{line_of(code, m.start())}: cannot read __shared__ {decl.strip()}")
        enter = " ".join(f"CUEMU_SHARED({n});" for n in names)
        edits.append((m.start(), semi + 1, f"static{decl}; {enter}"))


def launch_bounds(src, code, path, edits):
    """Drop __launch_bounds__(n[, m]) and check n against the block size at the top of the body."""
    for m in re.finditer(r"\b__launch_bounds__\s*\(", code):
        depth, i = 1, m.end()
        while i < len(code) and depth:
            depth += {"(": 1, ")": -1}.get(code[i], 0)
            i += 1
        args = split_top(src[m.end():i - 1])
        depth, j = 0, i  # the function body: the first { outside the parameter list
        while j < len(code) and not (code[j] == "{" and depth == 0):
            depth += {"(": 1, ")": -1}.get(code[j], 0)
            if code[j] == ";" and depth == 0:
                raise RewriteError(f"{path}:{line_of(code, m.start())}: __launch_bounds__ on a declaration")
            j += 1
        if j == len(code):
            raise RewriteError(f"{path}:{line_of(code, m.start())}: __launch_bounds__ without a body")
        edits.append((m.start(), i, ""))
        edits.append((j + 1, j + 1, f" cuemu_launch_bounds({args[0].strip()}, __FILE__, __LINE__);"))


def c_string(lits, path, line):
    """The value of adjacent C string literals (the escapes PTX templates use)."""
    out = []
    for lit in re.findall(r'"((?:[^"\\]|\\.)*)"', lits):
        i = 0
        while i < len(lit):
            c = lit[i]
            if c == "\\":
                nxt = lit[i + 1]
                if nxt not in 'nt"\\':
                    raise RewriteError(f"{path}:{line}: escape \\{nxt} in an asm template")
                out.append({"n": "\n", "t": "\t"}.get(nxt, nxt))
                i += 2
            else:
                out.append(c)
                i += 1
    return "".join(out)


def asm_operands(src, code, start, end, kinds, path, line):
    """`"=f"(x), "r"(y)` between start and end -> [(constraint, expr)]; constraints limited to kinds."""
    text, blanked = src[start:end], code[start:end]
    if not blanked.strip():
        return []
    ops, pos = [], 0
    for part in split_top(blanked):
        seg = text[pos:pos + len(part)]
        pos += len(part) + 1
        m = re.fullmatch(r'\s*"([^"]*)"\s*\((.*)\)\s*', seg, re.S)
        if not m or m.group(1) not in kinds:
            raise RewriteError(f"{path}:{line}: asm operand {seg.strip()!r}: the emulator takes {', '.join(kinds)}")
        ops.append((m.group(1), m.group(2).strip()))
    return ops


def asm_statements(src, code, path, edits):
    """asm [volatile] (template : outputs : inputs [: clobbers]); -> a cuemu_asm call. The
    template stays a string that the emulator reads at run time (cuemu.cpp: cuemu_asm)."""
    for m in re.finditer(r"\b(?:asm|__asm__)\s*(?:volatile\s*|__volatile__\s*)?\(", code):
        line = line_of(code, m.start())
        depth, i = 1, m.end()
        while i < len(code) and depth:
            depth += {"(": 1, ")": -1}.get(code[i], 0)
            i += 1
        if depth:
            raise RewriteError(f"{path}:{line}: asm without its closing parenthesis")
        inner0, inner1 = m.end(), i - 1
        colons, d = [], 0
        for j in range(inner0, inner1):
            c = code[j]
            if c in "([{":
                d += 1
            elif c in ")]}":
                d -= 1
            elif c == ":" and d == 0:
                if code[j + 1] == ":" or code[j - 1] == ":":
                    raise RewriteError(f"{path}:{line}: asm with '::' (write every section)")
                colons.append(j)
        if len(colons) < 2 or len(colons) > 3:
            raise RewriteError(f"{path}:{line}: asm needs template : outputs : inputs [: clobbers]")
        tmpl = c_string(src[inner0:colons[0]], path, line)
        outs = asm_operands(src, code, colons[0] + 1, colons[1], ("=f", "=r"), path, line)
        ins = asm_operands(src, code, colons[1] + 1, colons[2] if len(colons) > 2 else inner1, ("f", "r"), path, line)
        if len(colons) > 2 and code[colons[2] + 1:inner1].strip() and "memory" not in src[colons[2] + 1:inner1]:
            raise RewriteError(f"{path}:{line}: asm clobbers other than \"memory\" are not emulated")
        lit = tmpl.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n").replace("\t", "\\t")
        o = ", ".join(f"cuemu_asm_out_{c[1]}(&({e}))" for c, e in outs)
        n = ", ".join(f"cuemu_asm_in_{c}({e})" for c, e in ins)
        text = f'cuemu_asm("{lit}", __FILE__, __LINE__, {{{o}}}, {{{n}}})'
        edits.append((m.start(), i, text))


def pragmas(code, edits):
    for m in re.finditer(r"^[ \t]*#[ \t]*pragma[ \t]+unroll\b[^\n]*", code, re.M):
        edits.append((m.start(), m.end(), ""))


def rewrite(src, path):
    code = blank(src)
    edits = []
    launches(src, code, path, edits)
    shared(src, code, path, edits)
    launch_bounds(src, code, path, edits)
    asm_statements(src, code, path, edits)
    pragmas(code, edits)
    edits.sort()
    for (a0, a1, _), (b0, _b1, _t) in zip(edits, edits[1:]):
        if b0 < a1:
            raise RewriteError(f"{path}:{line_of(code, b0)}: overlapping rewrites")
    out, pos = [], 0
    for a, b, text in edits:
        out.append(src[pos:a])
        missing = src.count("\n", a, b) - text.count("\n")
        if missing < 0:
            raise RewriteError(f"{path}:{line_of(code, a)}: a rewrite added lines")
        out.append(text + "\n" * missing)
        pos = b
    out.append(src[pos:])
    res = "".join(out)
    if res.count("\n") != src.count("\n"):
        raise RewriteError(f"{path}: the rewrite changed the number of lines")
    return f'#line 1 "{path}"\n' + res


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: cu2cpp.py SRC DST")
    src_path, dst_path = sys.argv[1], sys.argv[2]
    with open(src_path) as f:
        src = f.read()
    try:
        out = rewrite(src, src_path)
    except RewriteError as e:
        sys.exit(f"cu2cpp: {e}")
    with open(dst_path, "w") as f:
        f.write(out)


if __name__ == "__main__":
    main()
