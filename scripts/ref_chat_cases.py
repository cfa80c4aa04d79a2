"""Small templates that each exercise one group of Jinja constructs (inputs only: the expected
outputs come from rendering them with Jinja2 in ref_chat_templates.py)."""

MSGS = [
    {"role": "system", "content": "sys"},
    {"role": "user", "content": "Hello there"},
    {"role": "assistant", "content": "General Kenobi", "extra": {"k": [1, 2.5, None, True]}},
]


def case(case_name, source, expect_error=False, **variables):
    c = {"name": case_name, "source": source, "vars": variables}
    if expect_error:
        c["expect_error"] = True
    return c


MICRO_CASES = [
    # ---- whitespace control, trim_blocks, lstrip_blocks, comments, raw
    case("ws_trim_lstrip", "  {% if true %}\n    yes\n  {% endif %}\nend\n"),
    case("ws_dash", "a  {%- if true -%}  b  {%- endif -%}  c\n\n{{- 'd' -}}\n\n e"),
    case("ws_plus", "x\n    {%+ if true %}y{% endif +%}\nz"),
    case("ws_comment", "a\n  {# comment #}\nb {#- trimmed -#}   c\n{# multi\nline #}\nd"),
    case("ws_raw", "{% raw %}{{ not }} {% evaluated %}{% endraw %}|\n  {% raw -%}  x  {%- endraw %}|"),
    case("ws_var_no_lstrip", "  {{ 'v' }}\n  text\n\t{% if true %}t{% endif %}"),
    case("ws_crlf", "a\r\n{% if true %}\r\nb\r\n{% endif %}\r\nc\r\n"),
    case("ws_trailing_newline_kept_once", "line\n\n"),
    case("ws_unicode_space", "a\u3000{%- if true %}b{% endif %}"),
    # ---- literals, escapes, output formatting
    case("lit_strings", "{{ 'it\\'s' }} {{ \"say \\\"hi\\\"\" }} {{ 'tab\\there' }} {{ '\\u00e9\\x41\\n|' }} {{ 'a' 'b' }} {{ '\\d' }}"),
    case("lit_numbers", "{{ 1 }} {{ -2 }} {{ 1.5 }} {{ 1e3 }} {{ 2.5e-5 }} {{ 1_000 }} {{ 0.1 + 0.2 }} {{ 1/3 }} {{ 10/2 }} {{ 1e16 }} {{ 123456789012345.0 }} {{ 1e-4 }} {{ -0.0 }}"),
    case("lit_repr", "{{ [1, 'a', none, true, false, 1.0, {'k': 'v', 2: [3]}] }} {{ (1,) }} {{ (1, 'x') }} {{ none }} {{ True }} {{ {'q': \"it's\", 'd': 'say \"x\"'} }} {{ ['é', '\\n', '\\x01'] }}"),
    case("lit_undefined_prints_empty", "[{{ missing }}][{{ messages[0].nothing }}][{{ messages[10] }}]", messages=MSGS),
    # ---- operators
    case("op_arith", "{{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ -7 % 3 }} {{ 7.5 % 2 }} {{ 2 ** 10 }} {{ 2 ** -1 }} {{ 2 ** 3 ** 2 }} {{ -2 ** 2 }} {{ 3 * 'ab' }} {{ [1] * 3 }} {{ 7 / 2 }} {{ 1 + 2.0 }} {{ true + 1 }}"),
    case("op_concat", "{{ 'a' ~ 1 ~ none ~ missing ~ [1] ~ true }} {{ 'x' + 'y' }} {{ [1, 2] + [3] }}"),
    case("op_compare", "{{ 1 < 2 < 3 }} {{ 1 < 3 < 2 }} {{ 'a' < 'b' }} {{ [1, 2] < [1, 3] }} {{ 1 == 1.0 }} {{ true == 1 }} {{ 'a' != 'b' }} {{ none == none }} {{ missing == none }} {{ 2 >= 2 }}"),
    case("op_in", "{{ 'ell' in 'hello' }} {{ 'x' not in 'hello' }} {{ 2 in [1, 2] }} {{ 'k' in {'k': 1} }} {{ 'z' in missing }} {{ '' in 'abc' }}"),
    case("op_logic", "{{ 0 or 'x' }} {{ 'a' and 'b' }} {{ '' and 'b' }} {{ not [] }} {{ not 0 and 1 }} {{ none or [] }} [{{ missing or '' }}]"),
    case("op_cond", "{{ 'y' if true else 'n' }} {{ 'y' if 0 else 'n' }} [{{ 'y' if false }}] {{ 'a' if false else 'b' if true else 'c' }} {{ (1 if true else 2) + 10 }}"),
    case("op_unary_filter_precedence", "{{ -3 | abs }} {{ -(3 | abs) }} {{ not true | string }} {{ 1 + 2 | string }}", expect_error=True),
    case("op_precedence", "{{ 1 + 2 * 3 }} {{ (1 + 2) * 3 }} {{ 2 * 3 ~ 4 }} {{ -2 | abs }} {{ not 1 == 2 }} {{ 10 - 2 - 3 }} {{ 2 ** 2 * 3 }}"),
    # ---- subscripts, slices, attributes
    case("sub_slices", "{{ x[1:3] }} {{ x[::-1] }} {{ x[::2] }} {{ x[-2:] }} {{ x[:-1] }} {{ x[5:1:-2] }} {{ x[-100:100] }} {{ s[::-1] }} {{ s[1:4] }} {{ s[-3:] }} {{ s[::3] }} {{ s[0] }} {{ s[-1] }} {{ x[-1] }} {{ x.0 }}",
         x=[0, 1, 2, 3, 4, 5, 6], s="héllo wörld 🙂!"),
    case("sub_attr_vs_item", "{{ d.name }} {{ d['name'] }} {{ d.items is defined }} {{ d['items'] }} {{ d.get('name') }} {{ d.get('nope', 'dflt') }} {{ d.get('nope') }}",
         d={"name": "N", "items": "I"}),
    # ---- statements
    case("for_loop_vars", "{% for x in xs %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.revindex0 }}{{ loop.first|int }}{{ loop.last|int }}{{ loop.length }}[{{ loop.previtem }}|{{ loop.nextitem }}]{{ loop.cycle('a', 'b') }} {% endfor %}", xs=["p", "q", "r"]),
    case("for_else_filter", "{% for x in [] %}no{% else %}empty{% endfor %} {% for x in range(10) if x is odd %}{{ x }}{{ '(' ~ loop.length ~ ')' if loop.last }}{% endfor %}"),
    case("for_break_continue", "{% for x in range(10) %}{% if x == 2 %}{% continue %}{% endif %}{% if x > 5 %}{% break %}{% endif %}{{ x }}{% endfor %}|{% for a in [1,2] %}{% for b in [1,2,3] %}{% if b == 2 %}{% break %}{% endif %}{{ a }}{{ b }} {% endfor %}{% endfor %}"),
    case("for_unpack_dict", "{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %} {% for k in d %}{{ k }}{% endfor %} {% for a, b in [[1, 2], (3, 4), 'xy'] %}{{ a }}{{ b }}{% endfor %} {% for c in 'hé!' %}[{{ c }}]{% endfor %}",
         d={"b": 1, "a": 2}),
    case("for_nested_loop", "{% for a in [1, 2] %}{% for b in 'xy' %}{{ loop.index }}{{ b }}{% endfor %}{{ loop.index }};{% endfor %}"),
    case("set_scoping", "{% set y = 1 %}{% for x in [1, 2] %}{% set y = y + x %}{{ y }}{% endfor %}{{ y }}{% if true %}{% set y = 5 %}{% endif %}{{ y }}{% set a, b = 1, 2 %}{{ a }}{{ b }}"),
    case("set_block_filter", "{% set body %}  Hello {{ name }}  {% endset %}[{{ body }}]{% set up | upper | trim %} shout {% endset %}[{{ up }}]", name="N"),
    case("namespace", "{% set ns = namespace(a=1, items=[]) %}{% for x in [1, 2, 3] %}{% set ns.a = ns.a * 2 %}{% set ns.items = ns.items + [x] %}{% endfor %}{{ ns.a }} {{ ns.items }} {{ ns.missing is defined }}"),
    case("namespace_from_dict", "{% set ns = namespace({'x': 1}, y=2) %}{{ ns.x }}{{ ns.y }}"),
    case("macro_defaults_varargs", "{% macro f(a, b=2, c='c') %}{{ a }}-{{ b }}-{{ c }}-{{ varargs }}-{{ kwargs }}{% endmacro %}{{ f(1) }}|{{ f(1, 3) }}|{{ f(1, c='z') }}|{{ f(1, 2, 3, 4) }}|{{ f(a=9) }}"),
    case("macro_recursion", "{% macro fact(n) %}{% if n <= 1 %}1{% else %}{{ n * (fact(n - 1) | int) }}{% endif %}{% endmacro %}{{ fact(10) }}"),
    case("macro_caller_args", "{% macro each(xs) %}{% for x in xs %}<{{ caller(x, loop.index) }}>{% endfor %}{% endmacro %}{% call(item, i) each(['a', 'b']) %}{{ i }}:{{ item | upper }}{% endcall %}"),
    case("filter_block", "{% filter upper %}hello {{ 'world' }}{% endfilter %} {% filter replace('a', 'o') | title %}banana band{% endfilter %}"),
    case("with_block", "{% with a = 1, b = 'x' %}{{ a }}{{ b }}{% endwith %}[{{ a }}]"),
    # ---- filters
    case("filters_string", "{{ ' Hi There ' | trim }}|{{ 'xxhixx' | trim('x') }}|{{ 'hello world' | title }}|{{ 'hELLO wORLD' | capitalize }}|{{ 'abc' | upper }}|{{ 'ÀÉÎ' | lower }}|{{ 'aaa' | replace('a', 'b', 2) }}|{{ 'a-b c(d' | title }}|{{ 'x' | center(5) }}|{{ 'one two  three' | wordcount }}|{{ '<&>\"' | e }}"),
    case("filters_seq", "{{ xs | length }} {{ xs | count }} {{ xs | first }} {{ xs | last }} {{ xs | reverse | list }} {{ 'abc' | reverse }} {{ xs | join('-') }} {{ xs | sort | list }} {{ xs | sort(reverse=true) | join }} {{ xs | unique | list }} {{ xs | min }} {{ xs | max }} {{ xs | sum }} {{ 'abc' | list }} {{ d | list }} {{ xs | batch(2) | list }} {{ xs | batch(3, 0) | list }}",
         xs=[3, 1, 2, 3], d={"k": 1, "j": 2}),
    case("filters_map_select", "{{ ms | map(attribute='role') | join(',') }} {{ ms | selectattr('role', 'equalto', 'user') | map(attribute='content') | list }} {{ ms | rejectattr('role', 'eq', 'system') | list | length }} {{ [1, 2, 3, 4] | select('odd') | list }} {{ [1, 2, 3, 4] | reject('even') | list }} {{ ['a', 'B'] | map('upper') | list }} {{ [0, 1, '', 'x'] | select | list }} {{ ms | selectattr('extra') | list | length }} {{ ms | map(attribute='extra.k.1', default='-') | list }}",
         ms=MSGS),
    case("filters_dict", "{{ d | dictsort }} {{ d | dictsort(by='value', reverse=true) }} {{ d | items | list }} {% for k, v in d | items %}{{ k }}{{ v }}{% endfor %} {{ d | length }}",
         d={"b": 2, "a": 3, "C": 1}),
    case("filters_default", "[{{ missing | default('dflt') }}] [{{ '' | default('e') }}] [{{ '' | default('e', true) }}] [{{ none | d('n') }}] [{{ 0 | default(5, boolean=true) }}]"),
    case("filters_numbers", "{{ '42' | int }} {{ '4.7' | int }} {{ 'x' | int }} {{ 'x' | int(7) }} {{ 3.9 | int }} {{ '2.5' | float }} {{ 'y' | float }} {{ -3 | abs }} {{ 2.5 | round }} {{ 3.5 | round }} {{ 2.675 | round(2) }} {{ 2.1 | round(0, 'ceil') }} {{ 2.9 | round(method='floor') }} {{ 7 | string }} {{ 1.0 | string }} {{ true | int }}"),
    case("filters_tojson", "{{ v | tojson }}\n{{ v | tojson(indent=2) }}\n{{ v | tojson(sort_keys=true) }}\n{{ v | tojson(ensure_ascii=true) }}\n{{ v | tojson(separators=(',', ':')) }}\n{{ [] | tojson(indent=2) }}{{ {} | tojson(indent=2) }}\n{{ 'é\"\\\\\\n\\t\\x01</' | tojson }}",
         v={"z": 1, "a": [1.5, 2.0, None, True, "é 🙂", {"n": -0.0}], "s": "line\nbreak", "big": 12345678901234567, "e": 1e-7, "f": 1e22}),
    case("filters_indent", "{{ 'a\\nb\\n\\nc' | indent }}|{{ 'a\\nb' | indent(2, true) }}|{{ 'a\\n\\nb' | indent(width='>>', blank=true) }}|{{ 'x' | indent(first=true) }}"),
    case("filters_safe_string_count", "{{ '<b>' | safe }} {{ none | string }} {{ 'abc' | count }} {{ [none] | string }}"),
    case("filters_items_undefined", "[{% for k, v in missing | items %}x{% endfor %}]"),
    # ---- tests
    case("tests_types", "{{ x is defined }}{{ y is undefined }}{{ none is none }}{{ 'a' is string }}{{ 1 is number }}{{ 1.5 is number }}{{ true is number }}{{ 1 is integer }}{{ true is integer }}{{ 1.0 is float }}{{ true is boolean }}{{ 1 is boolean }}{{ {} is mapping }}{{ [] is mapping }}{{ 'a' is iterable }}{{ 1 is iterable }}{{ [] is sequence }}{{ 'a' is sequence }}{{ {} is sequence }}{{ y is iterable }}{{ range is callable }}",
         x=1),
    case("tests_values", "{{ true is true }}{{ 1 is true }}{{ false is false }}{{ 0 is false }}{{ 3 is odd }}{{ 4 is even }}{{ 9 is divisibleby 3 }}{{ 9 is divisibleby(4) }}{{ 2 is eq 2 }}{{ 2 is equalto 3 }}{{ 2 is ne 3 }}{{ 1 is lt 2 }}{{ 2 is le 2 }}{{ 3 is gt 2 }}{{ 3 is ge 4 }}{{ 2 is in [1, 2] }}{{ 'abc' is lower }}{{ 'ABC' is upper }}{{ none is sameas none }}{{ 'upper' is filter }}{{ 'odd' is test }}{{ 'nope' is filter }}{{ x is not none }}{{ y is not defined }}",
         x=0),
    # ---- Python methods
    case("methods_str", "{{ s.startswith('He') }}{{ s.endswith(('x', 'd!')) }} {{ s.split() }} {{ s.split(' ', 1) }} {{ s.rsplit(' ', 1) }} {{ 'a,b,,c'.split(',') }} {{ '  x  y  '.split() }} {{ '  x  y  '.rsplit(None, 1) }} {{ s.strip('H!') }} {{ '  p '.lstrip() }}|{{ '  p '.rstrip() }}| {{ 'xyx'.strip('x') }} {{ s.replace('l', 'L') }} {{ s.replace('l', 'L', 1) }} {{ s.upper() }} {{ s.lower() }} {{ 'hello wORLD foo-bar' .title() }} {{ 'hELLO' .capitalize() }} {{ s.find('o') }} {{ s.find('zz') }} {{ s.rfind('o') }} {{ s.count('l') }} {{ '-'.join(['a', 'b']) }} {{ 'a\\nb\\r\\nc'.splitlines() }} {{ '123'.isdigit() }} {{ 'ab'.isalpha() }} {{ ' '.isspace() }} {{ 'é🙂x'.find('x') }} {{ 'abc'.removeprefix('a') }} {{ 'a=b=c'.partition('=') }} {{ '7'.zfill(3) }}",
         s="Hello World!"),
    case("methods_dict_list", "{{ d.keys() | list }} {{ d.values() | list }} {{ d.items() | list }} {{ d.get('a') }} {{ xs.count(2) }} {{ xs.index(3) }} {% for k, v in d.items() %}{{ k }}{{ v }}{% endfor %}",
         d={"a": 1, "b": [2]}, xs=[1, 2, 3, 2]),
    case("methods_str_unicode", "{{ s | length }} {{ s[2:5] }} {{ s.upper() }} {{ s.split('ö') }} {{ s | reverse }} {{ s.strip('ßé') }} {{ s.title() }}", s="éaöb straße 中文 é"),
    # ---- globals
    case("globals_range_dict", "{{ range(3) | list }} {{ range(1, 7, 2) | list }} {{ range(5, 0, -2) | list }} {{ dict(a=1, b='x') }} {{ dict(a=1).a }}"),
    case("globals_strftime", "{{ strftime_now('%Y-%m-%d %H:%M:%S') }} {{ strftime_now('%d %B %Y') }} {{ strftime_now('%a %b %j') }}"),
    # ---- generation spans
    case("gen_spans_basic", "<s>{% for m in messages %}{% if m.role == 'assistant' %}[A]{% generation %}{{ m.content }}</a>{% endgeneration %}\n{% else %}[{{ m.role }}]{{ m.content }}\n{% endif %}{% endfor %}", messages=MSGS + [{"role": "user", "content": "ünïcode"}, {"role": "assistant", "content": "réponse 🙂"}]),
    case("gen_spans_at_start_not_tracked", "{% generation %}first{% endgeneration %} then {% generation %}second{% endgeneration %}"),
    case("gen_spans_empty_output_before", "{{ '' }}{% generation %}tracked{% endgeneration %}"),
    case("gen_spans_in_loop_with_set", "x{% for i in range(3) %}{% set t = 'v' ~ i %}{% generation %}{{ t }}{% if loop.last %}!{% endif %}{% endgeneration %}-{% endfor %}"),
    # ---- errors
    case("err_unknown_tag", "line1\n{% frobnicate %}\n", expect_error=True),
    case("err_unclosed_if", "a\n{% if true %}\nb\n", expect_error=True),
    case("err_unclosed_for", "{% for x in y %}\n{% if x %}\n{% endif %}\n", expect_error=True),
    case("err_unknown_filter", "ok\n\n{{ x | frobnicate }}", expect_error=True),
    case("err_unknown_test", "{% if x is frobnicated %}{% endif %}", expect_error=True),
    case("err_raise_exception", "a\nb\n{% if messages | length > 1 %}{{ raise_exception('Only one message is supported, got ' ~ messages | length) }}{% endif %}", expect_error=True, messages=MSGS),
    case("err_undefined_attr_chain", "x\n{{ missing.attr }}", expect_error=True),
    case("err_undefined_method", "{{ messages[0].nothing.strip() }}", expect_error=True, messages=MSGS),
    case("err_list_append_unsafe", "{% set xs = [] %}\n{{ xs.append(1) }}", expect_error=True),
    case("err_add_str_int", "\n\n{{ 'a' + 1 }}", expect_error=True),
    case("err_stray_endfor", "{% endfor %}", expect_error=True),
    case("err_bad_expr", "{{ 1 + }}", expect_error=True),
    case("err_set_non_namespace", "{% set d = {} %}{% set d.x = 1 %}", expect_error=True),
    case("err_undefined_call", "\n{{ nofunc(1) }}", expect_error=True),
    case("err_range_too_big", "{{ range(1000000) | length }}", expect_error=True),
    case("err_generator_length", "{{ [1, 2] | select('odd') | length }}", expect_error=True),
    case("err_undefined_compare", "{{ missing < 1 }}", expect_error=True),
    case("err_break_outside_loop", "{% break %}", expect_error=True),
    case("err_missing_comment_end", "a {# never closed", expect_error=True),
]
