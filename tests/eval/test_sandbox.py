"""VirtualSandbox: every command, its errors, determinism, and action signatures."""

from __future__ import annotations

from arc_eval.sandbox import COMMAND_HELP, VirtualSandbox, action_signature, paginate

FILES = {
    "a.txt": "alpha\nbeta\ngamma\nALPHA again\n",
    "long.txt": "".join(f"line {n:03d} " + "x" * 30 + "\n" for n in range(100)),
    "empty.txt": "",
}


def make() -> VirtualSandbox:
    return VirtualSandbox(FILES, page_chars=400)


def test_ls_lists_files_with_sizes_and_pages() -> None:
    observation = make().run("ls")
    assert observation.returncode == 0
    lines = observation.text.splitlines()
    assert [line.split("\t")[0] for line in lines] == ["a.txt", "empty.txt", "long.txt"]
    assert lines[0] == f"a.txt\t{len(FILES['a.txt'])} chars\t1 page"
    assert make().run("ls extra").returncode == 2


def test_cat_returns_the_whole_file_and_missing_file_is_rc1() -> None:
    sandbox = make()
    assert sandbox.run("cat a.txt").text == FILES["a.txt"]
    assert sandbox.run("cat ./a.txt").text == FILES["a.txt"]
    missing = sandbox.run("cat nope.txt")
    assert missing.returncode == 1
    assert "No such file" in missing.text and "a.txt" in missing.text
    assert sandbox.run("cat").returncode == 2
    assert sandbox.run("CAT a.txt").text == FILES["a.txt"]
    assert sandbox.run("cat A.TXT").returncode == 1


def test_head_both_forms_and_bad_numbers() -> None:
    sandbox = make()
    assert sandbox.run("head a.txt 2").text == "alpha\nbeta\n"
    assert sandbox.run("head -n 1 a.txt").text == "alpha\n"
    assert sandbox.run("head long.txt").text.count("\n") == 10
    assert sandbox.run("head a.txt two").returncode == 2
    assert sandbox.run("head missing.txt 3").returncode == 1


def test_grep_fixed_string_regex_and_case() -> None:
    sandbox = make()
    fixed = sandbox.run("grep alpha a.txt")
    assert fixed.returncode == 0 and fixed.text == "1:alpha"
    assert sandbox.run("grep -i alpha a.txt").text == "1:alpha\n4:ALPHA again"
    # A fixed string does not interpret regex syntax ...
    assert sandbox.run("grep 'a.p' a.txt").returncode == 1
    # ... while -E does.
    assert sandbox.run("grep -E '^g.m' a.txt").text == "3:gamma"
    assert sandbox.run('grep "ALPHA again" a.txt').text == "4:ALPHA again"
    assert sandbox.run("grep zzz a.txt").returncode == 1
    assert sandbox.run("grep -E '(' a.txt").returncode == 2
    assert sandbox.run("grep -x a a.txt").returncode == 2
    assert sandbox.run("grep 'unbalanced a.txt").returncode == 2


def test_grep_caps_the_number_of_matches() -> None:
    sandbox = VirtualSandbox({"many.txt": "hit\n" * 450})
    text = sandbox.run("grep hit many.txt").text
    assert text.count("\n") == 200
    assert text.endswith("250 more matching lines not shown")


def test_grep_regex_time_limit_refuses_catastrophic_patterns() -> None:
    sandbox = VirtualSandbox({"evil.txt": "a" * 40 + "!\n"})
    observation = sandbox.run("grep -E '(a+)+$' evil.txt")
    # The regex package either finds no match quickly or hits the time limit; never hangs.
    assert observation.returncode in (1, 2)


def test_read_pages_cut_at_line_boundaries() -> None:
    sandbox = make()
    text = FILES["long.txt"]
    spans = paginate(text, 400)
    assert "".join(text[a:b] for a, b in spans) == text
    assert all(text[b - 1] == "\n" for _, b in spans)
    assert all(b - a <= 400 for a, b in spans)
    first = sandbox.run("read long.txt 1")
    assert first.returncode == 0
    assert first.text.startswith(f"[long.txt page 1/{len(spans)}, characters 1-{spans[0][1]}")
    assert "next: read long.txt 2" in first.text
    last = sandbox.run(f"read long.txt {len(spans)}")
    assert "last page" in last.text
    assert sandbox.run("read long.txt").text == first.text
    out_of_range = sandbox.run(f"read long.txt {len(spans) + 1}")
    assert out_of_range.returncode == 1 and f"pages 1 to {len(spans)}" in out_of_range.text
    assert sandbox.run("read long.txt 0").returncode == 1
    assert sandbox.run("read long.txt x").returncode == 2
    assert sandbox.run("read empty.txt 1").text.startswith("[empty.txt page 1/1")


def test_paginate_cuts_hard_when_a_line_is_longer_than_a_page() -> None:
    assert paginate("x" * 10, 4) == [(0, 4), (4, 8), (8, 10)]
    assert paginate("", 4) == [(0, 0)]


def test_submit_returns_the_answer_verbatim() -> None:
    observation = make().run("submit The correct answer is (B)")
    assert observation.returncode == 0
    assert observation.submitted == "The correct answer is (B)"
    assert make().run("submit NEEDLE=ABC 'quoted").submitted == "NEEDLE=ABC 'quoted"
    assert make().run("submit\tNEEDLE=A").submitted == "NEEDLE=A"
    assert make().run("SUBMIT NEEDLE=A").submitted == "NEEDLE=A"
    empty = make().run("submit   ")
    assert empty.returncode == 2 and empty.submitted is None


def test_unknown_command_is_127_and_lists_the_commands() -> None:
    observation = make().run("rm -rf /")
    assert observation.returncode == 127
    assert COMMAND_HELP in observation.text
    assert make().run("").returncode == 2


def test_reading_is_deterministic_and_never_mutates() -> None:
    files = dict(FILES)
    sandbox = VirtualSandbox(files, page_chars=400)
    actions = ["ls", "cat a.txt", "head a.txt 2", "grep -i a a.txt", "read long.txt 2", "submit x"]
    first = [sandbox.run(action) for action in actions]
    files["a.txt"] = "changed by the caller"
    second = [sandbox.run(action) for action in actions]
    assert first == second
    assert dict(sandbox.files) == FILES
    assert [VirtualSandbox(FILES, page_chars=400).run(a) for a in actions] == first


def test_action_signature_normalizes_whitespace_quotes_and_paths() -> None:
    assert action_signature("cat  a.txt ") == action_signature("cat ./a.txt")
    assert action_signature("grep 'two words' a.txt") == action_signature('grep "two words"  a.txt')
    assert action_signature("head -n 5 a.txt") == action_signature("head a.txt 5")
    assert action_signature("read a.txt 1") != action_signature("read a.txt 2")
    assert action_signature("submit  NEEDLE=AB   x") == "submit NEEDLE=AB x"
    assert action_signature("grep 'unbalanced a.txt") == "grep 'unbalanced a.txt"
    assert action_signature("   ") == ""
    assert action_signature("CAT a.txt") == action_signature("cat a.txt")
    assert action_signature("submit\tNEEDLE=A") == "submit NEEDLE=A"
