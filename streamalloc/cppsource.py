"""Reading a learner's C++/CUDA source, comments ignored: what a lab's check reads before it runs anything.

    code = inline(src, "pipeline_stream_ordered")   # the function, with the file's own helpers it calls inlined
    calls(code, "cudaMallocAsync")                  # offsets of the calls
    loop_bodies(code)                                # (start, end) of every for / while / do loop's body
    calls_in_loops(code, "cudaFree")                 # how many of them stand in a loop
    call_arguments(code, pos)                        # the arguments of one call, as written

What runs on which stream and what waits for what is labchecks/streams.py's one reading (Order), built on these.
Every offset is one into the comment-free code (`strip_comments(src)`), whichever function gives it, so they
can be compared with each other. Where the reading cannot tell (a stream passed through an array, a function
pointer), the functions say so (None, or an argument the caller does not recognize) rather than guess: a
lab's check then says "cannot tell from the source", and the program's results decide.
"""
from __future__ import annotations

import re

KEYWORDS = {"if", "for", "while", "switch", "do", "return", "sizeof", "catch", "else"}


def strip_comments(src: str) -> str:
    """The code without its comments; idempotent, so offsets into its result stay offsets into it."""
    src = re.sub(r"/\*.*?\*/", " ", src, flags=re.S)
    return re.sub(r"//[^\n]*", "", src)


def names(src: str, name: str) -> bool:
    """Whether the code (comments aside) writes `name` as a whole word: called, taken through a pointer, a macro's
    argument or a string (cudaGetDriverEntryPoint("cuMemAllocAsync", ...))."""
    return re.search(rf"\b{re.escape(name)}\b", strip_comments(src)) is not None


def normalized(src: str) -> str:
    """The code with comments removed and all whitespace runs made one space: equal for equal programs."""
    return " ".join(strip_comments(src).split())


def _closing(code: str, start: int, open_: str, close: str) -> int:
    """The offset just past the bracket that closes the one at code[start] (len(code) if it is never closed)."""
    depth = 0
    for i in range(start, len(code)):
        depth += code[i] == open_
        depth -= code[i] == close
        if depth == 0:
            return i + 1
    return len(code)


def _skip_space(code: str, i: int) -> int:
    while i < len(code) and code[i].isspace():
        i += 1
    return i


def statement_end(code: str, start: int) -> int:
    """The offset just past the statement that starts at (or after the spaces at) `start`: a block in braces,
    an if/for/while/switch with its body (and else), a do ... while (...);, or a simple statement up to its
    semicolon."""
    j = _skip_space(code, start)
    if j >= len(code):
        return len(code)
    if code[j] == "{":
        return _closing(code, j, "{", "}")
    m = re.match(r"(if|for|while|switch)\s*\(", code[j:])
    if m:
        k = _closing(code, j + m.end() - 1, "(", ")")
        if m[1] == "while" and code[_skip_space(code, k):_skip_space(code, k) + 1] == ";":
            return _skip_space(code, k) + 1
        end = statement_end(code, k)
        if m[1] == "if":
            e = re.match(r"\s*else\b", code[end:])
            if e:
                end = statement_end(code, end + e.end())
        return end
    m = re.match(r"do\b", code[j:])
    if m:
        end = statement_end(code, j + m.end())
        w = re.match(r"\s*while\s*\(", code[end:])
        if w:
            end = _closing(code, end + w.end() - 1, "(", ")")
            end = _skip_space(code, end)
            end += code[end:end + 1] == ";"
        return end
    depth = 0
    for i in range(j, len(code)):
        c = code[i]
        depth += c in "([{"
        depth -= c in ")]}"
        if depth < 0:  # the end of the enclosing block: a statement without its semicolon
            return i
        if c == ";" and depth == 0:
            return i + 1
    return len(code)


def calls(src: str, name: str) -> list[int]:
    """Offsets where `name(` is called in code (comments ignored; cudaMalloc does not match cudaMallocAsync)."""
    return [m.start() for m in re.finditer(rf"\b{re.escape(name)}\s*\(", strip_comments(src))]


def launches(src: str) -> list[tuple[str, int]]:
    """(kernel, offset) of every kernel launch, `kernel<<<...>>>(...)`, in code (comments ignored)."""
    return [(m[1], m.start()) for m in re.finditer(r"\b(\w+)\s*<<<", strip_comments(src))]


def loop_bodies(src: str) -> list[tuple[int, int]]:
    """(start, end) offsets of the body of every for, while and do loop, with or without braces."""
    code = strip_comments(src)
    bodies = []
    for m in re.finditer(r"\b(for|while)\s*\(|\bdo\b", code):
        if m[0] == "do":
            j = _skip_space(code, m.end())
        else:
            j = _skip_space(code, _closing(code, m.end() - 1, "(", ")"))
            if code[j:j + 1] == ";":  # the while (...); that ends a do loop, or an empty loop
                continue
        bodies.append((j, statement_end(code, j)))
    return bodies


def calls_in_loops(src: str, name: str) -> int:
    """How many calls of `name` stand inside a loop body."""
    bodies = loop_bodies(src)
    return sum(any(a <= pos < b for a, b in bodies) for pos in calls(src, name))


def in_loops(src: str, positions) -> list[int]:
    """The positions (offsets) that stand inside a loop body."""
    bodies = loop_bodies(src)
    return [p for p in positions if any(a <= p < b for a, b in bodies)]


def split_arguments(text: str) -> list[str]:
    """Split an argument list at the commas that are not inside brackets; each argument stripped."""
    parts, depth, current = [], 0, ""
    for c in text:
        depth += c in "([{"
        depth -= c in ")]}"
        if c == "," and depth == 0:
            parts.append(current.strip())
            current = ""
        else:
            current += c
    return [p for p in parts + [current.strip()] if p]


def call_arguments(src: str, pos: int) -> list[str]:
    """The arguments, as written, of the call at offset `pos` (as `calls` gives it) in comment-free code."""
    code = strip_comments(src)
    paren = code.index("(", pos)
    return split_arguments(code[paren + 1:_closing(code, paren, "(", ")") - 1])


# -- functions ---------------------------------------------------------------------------------------------
_DEFINITION = re.compile(r"\b(\w+)\s*\(([^;{}]*)\)\s*(?:const\s*)?\{")


def functions(src: str) -> dict[str, tuple[list[str], int, int]]:
    """The functions defined at the top level of the file: name -> (parameter names, start of the name,
    end of the body). Kernels are included (they are launched, not called, so they are never inlined)."""
    code = strip_comments(src)
    found, depth, i = {}, 0, 0
    while i < len(code):
        if code[i] == "{":
            depth += 1
        elif code[i] == "}":
            depth -= 1
        elif depth == 0 and (code[i].isalpha() or code[i] == "_") and (i == 0 or not (code[i - 1].isalnum()
                                                                                      or code[i - 1] == "_")):
            m = _DEFINITION.match(code, i)
            if m and m[1] not in KEYWORDS:
                end = _closing(code, m.end() - 1, "{", "}")
                params = [_parameter_name(p) for p in split_arguments(m[2]) if p.strip() != "void"]
                found.setdefault(m[1], (params, i, end))
                i = end
                continue
            word = re.match(r"\w+", code[i:])
            i += len(word[0])
            continue
        i += 1
    return found


def _parameter_name(param: str) -> str:
    param = param.split("=")[0]
    names = re.findall(r"\w+", re.sub(r"\[[^\]]*\]", "", param))
    return names[-1] if names else ""


def function_text(src: str, name: str) -> str:
    """The definition of the C/C++ function `name`, comments removed, from its name to its closing brace.

    '' if there is none. Offsets found in it (calls, loop_bodies) are offsets into this text."""
    code = strip_comments(src)
    found = functions(code).get(name)
    return code[found[1]:found[2]] if found else ""


def inline(src: str, name: str, depth: int = 3) -> str:
    """The function `name`, with the body of every function of the same file that it calls (and that those
    call, `depth` levels deep) written in front of the statement that calls it (the two in one block), its
    parameters replaced by the arguments of the call. So a cudaMallocAsync inside a helper called in a loop stands in that loop,
    on the stream the caller passed. Lambdas the function defines are read the same way where they are called (their
    definitions left out), and an owner object whose deleter or destructor frees (a std::unique_ptr with a deleter, a
    struct with a destructor) has that body written at the end of the block it is declared in, where C++ runs it
    (a constructor's body where it is declared), with the members it was given; a member the reading cannot follow
    stays `owner.member`, which no check takes for a stream it knows. '' if the file does not define `name`."""
    code = strip_comments(src)
    defs = functions(code)
    if name not in defs:
        return ""
    text, lambdas = _lambdas(code[defs[name][1]:defs[name][2]])
    text = _inline(code, text, defs, depth, {name}, lambdas)
    return _owners(code, text, lambdas)


def _inline(code: str, text: str, defs: dict, depth: int, seen: set, lambdas: dict | None = None) -> str:
    if depth == 0:
        return text
    inserts = {}  # (start, end) of a calling statement: the inlined bodies of the helpers it calls
    helpers = {h: (params, code[code.index("{", start + len(h)):end]) for h, (params, start, end) in defs.items()}
    helpers.update(lambdas or {})
    for helper, (params, whole) in helpers.items():
        if helper in seen:
            continue
        for m in re.finditer(rf"(?<![\w.>]){re.escape(helper)}\s*\(", text):
            if re.search(r"\b(void|int|float|double|auto|static|unsigned|char|long|bool|size_t|u64)\s*\**\s*$",
                         text[:m.start()]):
                continue  # a declaration, not a call
            args = call_arguments(text, m.start())
            body = _inline(code, whole, defs, depth - 1, seen | {helper}, lambdas)
            for p, a in zip(params, args):
                if p:
                    body = re.sub(rf"\b{re.escape(p)}\b", lambda _m, a=a: a, body)
            at = _statement_start(text, m.start())
            inserts.setdefault((at, statement_end(text, at)), []).append(body)
    for (at, end), bodies in sorted(inserts.items(), key=lambda x: -x[0][0]):
        text = text[:at] + "{" + " ".join(bodies) + " " + text[at:end] + "}" + text[end:]
    return text


def _statement_start(text: str, pos: int) -> int:
    """Where the statement holding offset `pos` begins: just after the ; { or } before it at its own level, or
    after the header of the if/for/while (or the else, the do) whose body it is, if that has no braces."""
    depth = 0
    for i in range(pos - 1, -1, -1):
        c = text[i]
        if c == ")" and depth == 0:
            opening = _opening(text, i)
            if re.search(r"\b(if|for|while|switch)\s*$", text[:opening]):
                return _after_keyword(text, i + 1)
            depth += 1
        elif c in ")]":
            depth += 1
        elif c in "([":
            if depth == 0:
                continue
            depth -= 1
        elif c in ";{}" and depth == 0:
            return _after_keyword(text, i + 1)
    return 0


def _opening(text: str, close: int) -> int:
    """The offset of the ( that the ) at text[close] closes."""
    depth = 0
    for i in range(close, -1, -1):
        depth += text[i] == ")"
        depth -= text[i] == "("
        if depth == 0:
            return i
    return 0


def _after_keyword(text: str, start: int) -> int:
    """`start`, or past an else or do that begins the statement there (its body is the statement)."""
    m = re.match(r"\s*(else|do)\b", text[start:])
    return _after_keyword(text, start + m.end()) if m else start


_LAMBDA = re.compile(r"\b(?:const\s+)?(?:auto|std::function\s*<[^;{}]*?>)\s*&?\s*(\w+)\s*=\s*\[[^\]]*\]\s*"
                     r"\(([^)]*)\)\s*(?:mutable\s*)?(?:->\s*[\w:<>\s*&]+?)?\s*\{")


def _lambdas(text: str) -> tuple[str, dict]:
    """The text with its lambda definitions (`auto name = [...](params) { body };`) left out, and {name: (parameter
    names, body in braces)}."""
    found = {}
    while True:
        m = _LAMBDA.search(text)
        if not m:
            return text, found
        end = _closing(text, m.end() - 1, "{", "}")
        params = [_parameter_name(p) for p in split_arguments(m[2]) if p.strip() != "void"]
        found[m[1]] = (params, text[m.end() - 1:end])
        stop = end + (text[_skip_space(text, end):_skip_space(text, end) + 1] == ";") + (_skip_space(text, end) - end)
        text = text[:m.start()] + " " * (stop - m.start()) + text[stop:]  # offsets elsewhere stay as they were


def _structs(code: str) -> dict:
    """The file's structs and classes: name -> {"members": [field names in order], "ctor": (params, {member: param}, body),
    "dtor": body, "call": (params, body)} (operator()), the parts it has."""
    found = {}
    for m in re.finditer(r"\b(?:struct|class)\s+(\w+)\s*(?::[^{;]*)?\{", code):
        name, end = m[1], _closing(code, m.end() - 1, "{", "}")
        body, info = code[m.end():end - 1], {}
        flat, i = "", 0  # the body with every nested block (a method's body) left out
        while i < len(body):
            if body[i] == "{":
                i = _closing(body, i, "{", "}")
                flat += ";"
                continue
            flat += body[i]
            i += 1
        members = []
        for decl in flat.split(";"):  # the fields: declarations without parentheses, at the struct's own level
            decl = re.sub(r"\b(?:public|private|protected)\s*:", "", decl).split("=")[0].strip()
            if decl and "(" not in decl and len(re.findall(r"\w+", decl)) >= 2:
                members += [n.strip().lstrip("*&").strip() for n in decl.split(",")[1:]]
                members.append(re.findall(r"\w+", decl.split(",")[0])[-1])
        members = [n for n in dict.fromkeys(members) if re.fullmatch(r"\w+", n)]
        info["members"] = members
        ctor = re.search(rf"(?<![~\w]){re.escape(name)}\s*\(([^)]*)\)\s*(?::([^{{]*))?\{{", body)
        if ctor:
            params = [_parameter_name(p) for p in split_arguments(ctor[1])]
            init = {a: b.strip() for a, b in re.findall(r"(\w+)\s*[({]([^)}]*)[)}]", ctor[2] or "")}
            info["ctor"] = (params, init, body[ctor.end() - 1:_closing(body, ctor.end() - 1, "{", "}")])
        dtor = re.search(rf"~{re.escape(name)}\s*\(\s*\)\s*(?:noexcept\s*)?\{{", body)
        if dtor:
            info["dtor"] = body[dtor.end() - 1:_closing(body, dtor.end() - 1, "{", "}")]
        call = re.search(r"\boperator\s*\(\s*\)\s*\(([^)]*)\)\s*(?:const\s*)?(?:noexcept\s*)?\{", body)
        if call:
            info["call"] = ([_parameter_name(p) for p in split_arguments(call[1])],
                            body[call.end() - 1:_closing(body, call.end() - 1, "{", "}")])
        found[name] = info
    return found


def _members(struct: dict, owner: str, made: str | None) -> dict:
    """{member: what it holds} for an object made by `made` (the text in the brackets of `T{a, b}` or `T(a, b)`, None if
    not known): aggregate members in order, or a constructor's initializers; a member not followed is `owner.member`."""
    values = {m: f"{owner}.{m}" for m in struct["members"]}
    if made is None:
        return values
    args = split_arguments(made)
    if "ctor" in struct:
        params, init, _ = struct["ctor"]
        given = dict(zip(params, args))
        for member, expr in init.items():
            if member in values:
                values[member] = given.get(expr.strip(), values[member]) if re.fullmatch(r"\w+", expr.strip()) \
                    else values[member]
    else:
        values.update(dict(zip(struct["members"], args)))
    return values


def _substitute(body: str, names: dict) -> str:
    for name, value in names.items():
        if name:
            body = re.sub(rf"(?<![\w.>]){re.escape(name)}\b", lambda _m, v=value: v, body)
    return body


def _owners(code: str, text: str, lambdas: dict) -> str:
    """`text` with the deleter or destructor of each owner object it declares written at the end of its block."""
    structs = {n: s for n, s in _structs(code).items() if "dtor" in s or "call" in s or "ctor" in s}
    inserts = []  # (offset, text)
    unique = re.compile(r"(?:std::)?unique_ptr\s*<[^;]*?,\s*(?:decltype\s*\(\s*(?P<lam>\w+)\s*\)|(?P<del>\w+))\s*>\s*"
                        r"(?:(?P<var>\w+)\s*[({](?P<args>[^;]*)[)}]\s*;|\((?P<args2>[^;]*)\)\s*;)")
    for m in unique.finditer(text):
        var = m["var"] or _declared_name(text, m.start())
        args = split_arguments(m["args"] if m["var"] else m["args2"])
        if not var:
            continue
        if m["lam"] and m["lam"] in lambdas:
            params, body = lambdas[m["lam"]]
            body = _substitute(body, dict(zip(params, [var])))
        elif m["del"] in structs and "call" in structs[m["del"]]:
            s = structs[m["del"]]
            made = re.fullmatch(rf"{re.escape(m['del'])}\s*[({{](.*)[)}}]", args[1].strip(), re.S) if len(args) > 1 else None
            params, body = s["call"]
            body = _substitute(_substitute(body, dict(zip(params, [var]))),
                               _members(s, var, made[1] if made else None if len(args) > 1 else ""))
        else:
            continue
        inserts.append((_block_end(text, m.start()), body))
    for name, s in structs.items():
        for m in re.finditer(rf"(?<![\w:<]){re.escape(name)}\s+(\w+)\s*(?:[({{](.*?)[)}}]|=\s*{re.escape(name)}\s*[({{](.*?)[)}}])?\s*;",
                             text):
            made = m[2] if m[2] is not None else m[3] if m[3] is not None else ""
            values = _members(s, m[1], made)
            if "ctor" in s:
                params, _, body = s["ctor"]
                ctor_values = {**values, **dict(zip(params, split_arguments(made)))}
                inserts.append((_statement_start(text, m.start()), _substitute(body, ctor_values)))
            if "dtor" in s:
                inserts.append((_block_end(text, m.start()), _substitute(s["dtor"], values)))
    for at, body in sorted(inserts, key=lambda x: -x[0]):
        text = text[:at] + " " + body + " " + text[at:]
    return text


def _declared_name(text: str, pos: int) -> str | None:
    """The name declared by `auto name = <expression at pos>`."""
    m = re.search(r"(\w+)\s*=\s*$", text[:pos])
    return m[1] if m else None


def _block_end(text: str, pos: int) -> int:
    """The offset of the } that closes the block holding offset `pos` (len(text) if none)."""
    depth = 0
    for i in range(pos - 1, -1, -1):
        depth += text[i] == "}"
        depth -= text[i] == "{"
        if depth < 0:
            return _closing(text, i, "{", "}") - 1
    return len(text)


CREATED_BY = ("cudaStreamCreate", "cudaStreamCreateWithFlags", "cudaStreamCreateWithPriority", "cudaEventCreate",
              "cudaEventCreateWithFlags", "cudaMemPoolCreate", "cudaDeviceGetDefaultMemPool", "cudaDeviceGetMemPool",
              "cudaIpcOpenEventHandle", "cudaMemPoolImportFromShareableHandle")
_PLAIN = re.compile(r"\w+(?:\s*\[\s*\d+\s*\])?")


def resolve(code: str, name: str, _depth: int = 0) -> str | None:
    """What a stream, event or pool named in `code` is, following the names given to it (`cudaStream_t a =
    producer;`, `auto &e = filled;`, transitively): the name it was first given, or the name itself (a parameter, a
    variable a cudaXxxCreate makes, an array element with a constant index). None where the reading cannot tell:
    an expression (`*p`, `v[i]`, a call), a name given more than one value, or one made and also assigned."""
    name = re.sub(r"\s+", "", name.strip())
    while name.startswith("(") and name.endswith(")") and _closing(name, 0, "(", ")") == len(name):
        name = name[1:-1]
    if _depth > 8 or not _PLAIN.fullmatch(name):
        return None
    if name in ("0", "NULL", "nullptr", "cudaStreamLegacy", "cudaStreamPerThread") or name.isdigit():
        return name
    values = set()
    for m in re.finditer(rf"(?<![\w.>*]){re.escape(name)}\s*=(?!=)\s*([^;,{{}}]+?)\s*[;,]", code):
        values.add(re.sub(r"\s+", "", m[1]))
    for m in re.finditer(rf"\b(?:cudaStream_t|cudaEvent_t|cudaMemPool_t|auto)\s*&?\s*{re.escape(name)}\s*[({{]([^;]*?)[)}}]\s*;",
                         code):
        values.add(re.sub(r"\s+", "", m[1]))
    made = any(re.search(rf"\b{c}\s*\(\s*&\s*{re.escape(name)}(?!\w)", code) for c in CREATED_BY)
    values -= {"", "nullptr", "NULL", "{}", "0"} if made else {""}  # set to nothing, then made by the call
    if "[" in name and (values or not made):
        return None  # an array's element: only one a cudaXxxCreate made, and nothing else, is known
    if not values:
        return name
    if len(values) > 1 or made:
        return None
    value = values.pop()
    value = re.sub(r"^\(\s*cudaStream_t\s*\)", "", value)
    return resolve(code, value, _depth + 1)


def aliases(code: str, value: str) -> set[str]:
    """`value` and the names given it in the code (`cudaStream_t st = s;`, `auto attr = X;`), transitively."""
    names, grown = {value}, True
    while grown:
        grown = False
        for m in re.finditer(r"\b(\w+)\s*=\s*\(?\s*(\w+)\s*\)?\s*[;,)]", code):
            if m[2] in names and m[1] not in names:
                names.add(m[1])
                grown = True
    return names


_NUMBER = re.compile(r"(0[xX][0-9a-fA-F]+|\d+)[uUlL]*")


def constant(code: str, expression: str, before: int | None = None) -> int | None:
    """The value of an integer expression as written, where the reading can tell: literals (with suffixes),
    UINT64_MAX, SIZE_MAX, ~0, << * + - and parentheses, casts to integer types, and names assigned such an
    expression (the last assignment before offset `before`). None where it cannot tell."""
    expr = expression.strip()
    expr = re.sub(r"^\(\s*(?:const\s+)?(?:void|uint64_t|size_t|u64|unsigned long long|cuuint64_t)\s*\*\s*\)\s*", "",
                  expr)
    if expr.startswith("&"):
        expr = expr[1:].strip()
    return _evaluate(code, expr, before, 0)


def _evaluate(code: str, expr: str, before, depth: int) -> int | None:
    if depth > 4:
        return None
    expr = re.sub(r"\(\s*(?:uint64_t|size_t|u64|unsigned long long|unsigned long|unsigned|int|long long|long)\s*\)",
                  "", expr)
    expr = re.sub(r"static_cast<\s*\w[\w\s]*>", "", expr)
    expr = expr.replace("UINT64_MAX", str(2**64 - 1)).replace("SIZE_MAX", str(2**64 - 1)).replace(
        "ULLONG_MAX", str(2**64 - 1))

    def name_value(m):
        name = m[0]
        if name in {"true", "false"}:
            return m[0]
        scope = code if before is None else code[:before]
        last = None
        for a in re.finditer(rf"\b{re.escape(name)}\s*(?:\[\s*\])?\s*=(?!=)\s*([^;,{{}}]+)[;,]", scope):
            last = a
        if last is None:
            raise LookupError(name)
        v = _evaluate(code, last[1], last.start(), depth + 1)
        if v is None:
            raise LookupError(name)
        return str(v)

    try:
        expr = re.sub(r"\b(?!0[xX])[A-Za-z_]\w*\b", name_value, expr)
    except LookupError:
        return None
    expr = _NUMBER.sub(lambda m: str(int(m[1], 0)), expr)
    if not re.fullmatch(r"[\d\s()+\-*<>~]*", expr) or not expr.strip():
        return None
    try:
        value = eval(expr.replace("~", "-1-"), {"__builtins__": {}})  # digits and operators only
    except Exception:  # noqa: BLE001 - anything the reading cannot evaluate: it cannot tell
        return None
    return value % 2**64 if isinstance(value, int) else None
