"""The documentation stays true: every `vit` command it shows parses, every relative link and
image resolves (anchors included), and the README stays a short front door.

Checked files: README.md, RELIABILITY.md and every docs/*.md. Commands are parsed with the real
`vit` parser and never run.
"""

import functools
import glob
import os
import re
import shlex

import pytest

ROOT = os.path.normpath(os.path.join(os.path.dirname(__file__), ".."))
README_START = """# vit_keras

```
pip install -e . && vit train          # the main job, offline, on the built-in default data
pip install -e ".[dev]" && pytest      # the test suite
```
"""
README_MAX_LINES = 200
MIN_COMMANDS = 30  # the documentation shows more; fewer means the search broke
MIN_LINKS = 30
BACK_LINK = "[← README](../README.md)"

SHELL_LANGUAGES = {"", "bash", "sh", "shell", "console"}
FENCE = re.compile(r"^\s*(```+|~~~+)\s*([\w+-]*)")
PROMPT = re.compile(r"^\s*(\$ |!)")  # a shell prompt, or a notebook cell's shell escape
ENV_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
PLACEHOLDER = re.compile(r"^[A-Z][A-Z0-9_]*$")
SUB_COMMAND = re.compile(r"^[a-z][a-z0-9_-]*$")  # `vit train` yes, output like `vit train:` no
SEPARATORS = {"&&", "||", ";", "|"}
REDIRECTIONS = {">", ">>", "<", "2>", "2>&1", "&>"}  # they end a command's arguments
LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
IMG_SRC = re.compile(r"<img\b[^>]*\bsrc=[\"']([^\"']+)[\"']", re.IGNORECASE)
HEADING = re.compile(r"^#{1,6}\s+(.+?)\s*#*\s*$")
INLINE_CODE = re.compile(r"(`+).+?\1")
EXTERNAL = re.compile(r"^[a-z][a-z0-9+.-]*:", re.IGNORECASE)  # http:, https:, mailto:, ...


def docs_pages() -> list[str]:
    """docs/*.md, relative to the repository root."""
    return sorted(os.path.relpath(path, ROOT)
                  for path in glob.glob(os.path.join(ROOT, "docs", "*.md")))


def doc_files() -> list[str]:
    """The checked Markdown files, relative to the repository root."""
    return ["README.md", "RELIABILITY.md", *docs_pages()]


def read_lines(path: str) -> list[str]:
    with open(os.path.join(ROOT, path), encoding="utf-8") as file:
        return file.read().splitlines()


# --- fenced code blocks and the `vit` commands in them ------------------------------------------


def fenced_blocks(lines: list[str]) -> list[tuple[str, int, int]]:
    """(language, opening line, closing line) of every fenced block; 0-based indices. A block
    left open runs to the end of the file."""
    blocks, index = [], 0
    while index < len(lines):
        match = FENCE.match(lines[index])
        if not match:
            index += 1
            continue
        fence, close = match.group(1), index + 1
        while close < len(lines) and not is_closing_fence(lines[close], fence):
            close += 1
        blocks.append((match.group(2).lower(), index, close))
        index = close + 1
    return blocks


def is_closing_fence(line: str, fence: str) -> bool:
    """A line of only fence characters, at least as many as the opening fence."""
    stripped = line.strip()
    return stripped.startswith(fence) and set(stripped) == {fence[0]}


def code_blocks(lines: list[str]) -> list[tuple[str, int, list[str]]]:
    """(language, 1-based line of the first content line, lines) of every fenced block."""
    return [(language, opening + 2, lines[opening + 1:closing])
            for language, opening, closing in fenced_blocks(lines)]


def split_words(text: str) -> list[str] | None:
    """Shell words of `text` without `# comments`; None while a quote is still open."""
    try:
        return shlex.split(text, comments=True)
    except ValueError:
        return None


def commands_of(words: list[str]) -> list[list[str]]:
    """The simple commands of a chain (`a && b; c | d`), env-var assignments removed."""
    commands, current = [], []
    for word in words:
        ends_command = word.endswith(";") and word not in SEPARATORS
        if word in SEPARATORS or ends_command:
            if ends_command:
                current.append(word[:-1])
            commands.append(current)
            current = []
        else:
            current.append(word)
    commands.append(current)
    return [without_env_and_redirections(command) for command in commands]


def without_env_and_redirections(words: list[str]) -> list[str]:
    """`A=1 B=2 vit train > log` -> `vit train`."""
    while words and ENV_ASSIGNMENT.match(words[0]):
        words = words[1:]
    for index, word in enumerate(words):
        if word in REDIRECTIONS:
            return words[:index]
    return words


def is_vit_command(words: list[str]) -> bool:
    """`vit SUB-COMMAND ...`: `vit_keras ...` or an output line `vit train: ...` is not."""
    return len(words) >= 2 and words[0] == "vit" and bool(SUB_COMMAND.match(words[1]))


def logical_line(body: list[str], start: int) -> tuple[str, int]:
    """The shell line starting at body[start]: `\\` continuations and quotes left open (a
    multi-line `TF_CONFIG='...'`) join the next lines; (text, index after it)."""
    text, end = PROMPT.sub("", body[start], count=1), start + 1
    while end < len(body):
        if text.rstrip().endswith("\\"):
            text = text.rstrip()[:-1] + " " + body[end]
        elif split_words(text) is None:
            text = text + "\n" + body[end]
        else:
            break
        end += 1
    return text, end


def vit_commands_in_block(body: list[str]) -> list[tuple[int, list[str]]]:
    """(index in body, argv after `vit`) of every `vit` command in a shell block. A line joined
    to the next ones is kept only if it holds a `vit` command; else (program output with a
    stray quote, say) the search goes on at the next line, so nothing is swallowed."""
    found, index = [], 0
    while index < len(body):
        text, end = logical_line(body, index)
        words = split_words(text) or []
        commands = [command for command in commands_of(words) if is_vit_command(command)]
        found.extend((index, command[1:]) for command in commands)
        index = end if commands else index + 1
    return found


def normalise_synopsis(args: list[str]) -> list[str]:
    """A usage synopsis as a command: `[--opt VALUE]` marks an optional part (its brackets
    are dropped, so its options are checked too), `...` stands for the options not shown, and
    a word in capitals (`DIR`, `H W`) is a placeholder, parsed as `1`, which string and number
    options alike accept."""
    words = [arg.strip("[]") for arg in args if arg.strip("[]") not in ("...", "")]
    return ["1" if PLACEHOLDER.match(word) else word for word in words]


def documented_commands() -> list[tuple[str, int, str, list[str]]]:
    """(file, line, command as written, argv) of every `vit` command in the checked files."""
    found = []
    for path in doc_files():
        for language, first_line, body in code_blocks(read_lines(path)):
            if language not in SHELL_LANGUAGES:
                continue
            for index, args in vit_commands_in_block(body):
                text = " ".join(["vit", *args])
                found.append((path, first_line + index, text, normalise_synopsis(args)))
    return found


COMMANDS = documented_commands()


@pytest.fixture(scope="module")
def vit_parser():
    """The real `vit` parser, built once: it imports every command module."""
    from vit import cli

    return cli.build_parser()


def test_the_documentation_shows_commands():
    assert len(COMMANDS) >= MIN_COMMANDS, [command for _, _, command, _ in COMMANDS]


@pytest.mark.parametrize(("path", "line", "command", "args"), COMMANDS,
                         ids=[f"{path}:{line}" for path, line, _, _ in COMMANDS])
def test_documented_command_parses(vit_parser, capsys, path, line, command, args):
    """argparse accepts the command (flags, choices, values); nothing is run."""
    try:
        vit_parser.parse_args(args)
    except SystemExit:
        error = capsys.readouterr().err.strip().splitlines()
        pytest.fail(f"{path}:{line}: {command}\n{error[-1] if error else ''}", pytrace=False)


TRAIN_COMMANDS = [entry for entry in COMMANDS if entry[3][:1] == ["train"]]


@pytest.mark.parametrize(("path", "line", "command", "args"), TRAIN_COMMANDS,
                         ids=[f"{path}:{line}" for path, line, _, _ in TRAIN_COMMANDS])
def test_documented_train_command_resolves(vit_parser, path, line, command, args):
    """`vit train` as written gets past everything it checks before reading data: its preset,
    keys and values, model and weight names, what --weights sets up, the run options (a
    documented line once stopped at once: the release's pooling was the user's to add)."""
    from training.presets import command_line

    parsed = vit_parser.parse_args(args)
    try:
        command_line.resolve_preset(parsed)
        command_line.run_options(parsed)
    except ValueError as error:
        pytest.fail(f"{path}:{line}: {command}\n{error}", pytrace=False)


# --- relative links, images and anchors ------------------------------------------------------


def prose_lines(lines: list[str]) -> list[tuple[int, str]]:
    """(1-based line number, text) of the lines outside fenced blocks."""
    in_blocks = {index for _, opening, closing in fenced_blocks(lines)
                 for index in range(opening, closing + 1)}
    return [(index + 1, line) for index, line in enumerate(lines) if index not in in_blocks]


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lowercase, punctuation but `-` and `_` removed, spaces
    to `-`. Links and inline code count by their text."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)
    text = text.replace("`", "").lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


@functools.cache
def anchors(path: str) -> frozenset[str]:
    """Every heading anchor of a Markdown file, with GitHub's -1, -2 for repeats."""
    seen: dict[str, int] = {}
    found = set()
    for _, line in prose_lines(read_lines(path)):
        match = HEADING.match(line)
        if not match:
            continue
        base = slug(match.group(1))
        count = seen.get(base, 0)
        seen[base] = count + 1
        found.add(base if count == 0 else f"{base}-{count}")
    return frozenset(found)


def documented_links() -> list[tuple[str, int, str]]:
    """(file, line, target) of every relative link, image and <img src> in the checked files."""
    found = []
    for path in doc_files():
        for number, line in prose_lines(read_lines(path)):
            text = INLINE_CODE.sub("", line)  # `[batch](...)` in code is no link
            for target in LINK.findall(text) + IMG_SRC.findall(text):
                if not EXTERNAL.match(target):
                    found.append((path, number, target))
    return found


LINKS = documented_links()


def test_the_documentation_has_links():
    assert len(LINKS) >= MIN_LINKS, LINKS


@pytest.mark.parametrize(("path", "line", "target"), LINKS,
                         ids=[f"{path}:{line}:{target}" for path, line, target in LINKS])
def test_relative_link_resolves(path, line, target):
    """The file or folder exists next to the linking file; an anchor names a heading there."""
    file_part, _, anchor = target.partition("#")
    linked = os.path.normpath(os.path.join(os.path.dirname(path), file_part)) if file_part \
        else path
    if not os.path.exists(os.path.join(ROOT, linked)):
        pytest.fail(f"{path}:{line}: {target}: {linked} does not exist")
    if anchor and not linked.endswith(".md"):
        pytest.fail(f"{path}:{line}: {target}: an anchor into a file that is not Markdown")
    if anchor and anchor not in anchors(linked):
        pytest.fail(f"{path}:{line}: {target}: {linked} has no heading #{anchor}")


# --- the README -------------------------------------------------------------------------------


def test_readme_is_a_short_front_door():
    lines = read_lines("README.md")
    assert len(lines) < README_MAX_LINES, f"README.md has {len(lines)} lines"


def test_readme_starts_with_the_two_commands():
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as file:
        assert file.read().startswith(README_START)


def test_every_docs_page_starts_with_its_title_and_the_way_back():
    for path in docs_pages():
        lines = read_lines(path)
        assert lines[0].startswith("# "), f"{path}: first line is not a `# Title`"
        assert BACK_LINK in lines[1:4], f"{path}: no {BACK_LINK} under the title"


# --- the checker itself -----------------------------------------------------------------------


def test_the_command_search_reads_shell_lines_as_a_shell_would():
    body = ["$ KERAS_BACKEND=jax vit train --epochs 2   # a comment",
            "vit_keras is not a command; neither is this output line:",
            "vit train: preset digits_tiny, objective classify",
            "pip install -e . && vit weights list; echo done | vit inspect --complexity B/16",
            "A='{\"open\":",
            "   1}' vit export --model m.keras \\",
            "    --formats onnx > log.txt",
            "it's output with a stray quote",
            "vit predict x.png --model m.keras ...   # the rest as above"]
    assert vit_commands_in_block(body) == [
        (0, ["train", "--epochs", "2"]),
        (3, ["weights", "list"]),
        (3, ["inspect", "--complexity", "B/16"]),
        (4, ["export", "--model", "m.keras", "--formats", "onnx"]),
        (8, ["predict", "x.png", "--model", "m.keras", "..."])]


def test_a_synopsis_parses_as_a_command():
    assert normalise_synopsis(["export", "[--output", "DIR]", "[--image-size", "H", "W]",
                               "[--int8-float-ops", "BATCH_MATMUL,SOFTMAX]", "..."]) == [
        "export", "--output", "1", "--image-size", "1", "1",
        "--int8-float-ops", "BATCH_MATMUL,SOFTMAX"]


def test_a_bad_flag_fails_to_parse(vit_parser):
    with pytest.raises(SystemExit):
        vit_parser.parse_args(["train", "--no-such-flag"])


def test_headings_give_github_anchors():
    assert slug("Training (`vit train`)") == "training-vit-train"
    assert slug("Backends: TensorFlow, JAX, PyTorch") == "backends-tensorflow-jax-pytorch"
    assert slug("Not covered (yet)") == "not-covered-yet"
    assert slug("TFLite on Android and Raspberry Pi (LiteRT)") == \
        "tflite-on-android-and-raspberry-pi-litert"
