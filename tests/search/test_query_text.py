"""The one normalisation of a request's text (indexer/query_text.py): what each way of writing it reads as."""

from __future__ import annotations

import pytest

from indexer.query_text import expand_shorthand, name_files, normalize_query, without_quoted


@pytest.mark.parametrize(
    ("written", "read"),
    [
        ("  \n show  me\t the log \n\n", "show me the log"),
        ("ＧＥＴ ｔｉｍｅ", "GET time"),  # full-width letters
        ("cafe\u0301", "caf\u00e9"),  # NFD accent composed
        ("a\u00a0b", "a b"),  # non-breaking space
        ("I\u2019d like \u201ctea\u201d", "I'd like \"tea\""),
        ("\ufeffsho\u200bw me\u200d", "show me"),  # byte order mark, zero-width space and joiner
        ("🔍 show me 👍🏽 ✅", "show me"),  # emoji with a skin tone
        ("**commit** my *staged* changes", "commit my staged changes"),
        ("- add two numbers", "add two numbers"),
        ("# Heading\n> quoted", "Heading\nquoted"),
        ("```text\nadd two numbers\n```", "add two numbers"),
        ("use `get_current_time`", "use get_current_time"),
        ("\u201cget_current_time\u201d", "get_current_time"),  # a request quoted whole
        ("what time is it??!", "what time is it?"),
        ("open a pull request from my\n  feature branch", "open a pull request from my feature branch"),
        ("- search flights\n- book a hotel", "search flights\nbook a hotel"),
        ("Hey, could you commit it? Thanks!", "could you commit it?"),
        # Quoted whole, its thanks are read as bare (they were kept: the quote ended the text, not the thanks).
        ("\u201creply in the thread, thanks\u201d", "reply in the thread"),
        ("\"Hi there, list my files\"", "list my files"),
        ("Hi there! what time is it. Thank you for your help.", "what time is it."),
    ],
)
def test_a_request_reads_as_its_plain_text(written: str, read: str) -> None:
    assert normalize_query(written) == read


@pytest.mark.parametrize(
    "kept",
    ["5 * 3 and 5*3", "the A* search algorithm", "__init__ of a class", "hello world program", "Thanks!",
     "list 30.5°C readings", "find a flight.\nbook a hotel",
     "Steps:\nbook a hotel", "search flights\nBook a hotel", "1. search flights\n2. book a hotel", "the thx file"],
)
def test_what_is_part_of_a_request_stays(kept: str) -> None:
    assert normalize_query(kept) == kept


@pytest.mark.parametrize("nothing", ["\u200b", "🙏 👍", "```\n```", "- "])
def test_a_request_of_nothing_else_reads_as_empty(nothing: str) -> None:
    assert normalize_query(nothing) == ""



@pytest.mark.parametrize(
    ("written", "read"),
    [
        ("list open PRs", "list open pull requests"),
        ("raise a pr against main", "raise a pull request against main"),
        ("DM bob", "direct message bob"),
        ("any new DMs?", "any new direct messages?"),
        ("fork the Repo", "fork the repository"),
        ("my repos", "my repositories"),
        # A name, a path or an identifier that holds one is left as written.
        ("call get_pr with pr_number 3", "call get_pr with pr_number 3"),
        ("octocat/repo and repo.json", "octocat/repo and repo.json"),
        ("PR-12 and repository", "PR-12 and repository"),
        ("prune the dmesg log", "prune the dmesg log"),
    ],
)
def test_chat_shorthand_is_spelled_out(written: str, read: str) -> None:
    assert expand_shorthand(written) == read


@pytest.mark.parametrize(
    ("written", "read"),
    [
        ("show me the first 20 lines of server.log", "show me the first 20 lines of file server.log"),
        ("when was report.pdf last modified?", "when was file report.pdf last modified?"),
        ("merge a.txt, b.txt and notes.md.", "merge file a.txt, file b.txt and file notes.md."),
        # Already a file, a host name, a URL or a path, an abbreviation, a version: as written.
        ("read the file config.yaml", "read the file config.yaml"),
        ("fetch example.com and docs.python.org", "fetch example.com and docs.python.org"),
        ("fetch https://example.com/page.html", "fetch https://example.com/page.html"),
        ("open src/app.py", "open src/app.py"),
        ("e.g. this, i.e. that", "e.g. this, i.e. that"),
        ("upgrade to 1.2.3", "upgrade to 1.2.3"),
    ],
)
def test_a_bare_file_name_is_read_as_a_file(written: str, read: str) -> None:
    assert name_files(written) == read


@pytest.mark.parametrize(
    ("written", "embedded"),
    [
        ("send 'deploy done' to #ops", "send '' to #ops"),
        ('commit with message "fix the login bug"', 'commit with message ""'),
        ("rename 'a' to 'b'", "rename '' to ''"),
        # A key of inline JSON names a parameter (which tool), its value is what to pass.
        ('{"time": "16:00", "target_timezone": "Asia/Tokyo"}', '{"time": "", "target_timezone": ""}'),
        ("call it with {'owner': 'acme', 'pull_number': 12}", "call it with {'owner': '', 'pull_number': 12}"),
        ('set "name" : "Dana"', 'set "name" : ""'),
        # Apostrophes are no quotes; a quote left open quotes nothing.
        ("what's bob's slack title", "what's bob's slack title"),
        ("the users' names and 'open", "the users' names and 'open"),
    ],
)
def test_the_dense_fields_read_a_request_without_its_quoted_values(written: str, embedded: str) -> None:
    assert without_quoted(written) == embedded
