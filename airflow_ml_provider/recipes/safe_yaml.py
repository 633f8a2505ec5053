"""Reading untrusted recipe YAML with bounded cost: size, nesting and alias expansion are capped
while the document is composed, before anything walks the tree (a 600-byte alias bomb expands to
10^9 values, 20,000 nested brackets overflow a recursive walk). Every refusal is a YAML error with
a mark, so it is reported as ``file:line`` like any syntax error.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path
from typing import Any

import yaml
from yaml.composer import ComposerError
from yaml.constructor import ConstructorError
from yaml.reader import ReaderError

MAX_BYTES = 1 << 20  # a recipe is a few kilobytes
MAX_DEPTH = 64  # a recipe nests about 6 levels
MAX_VALUES = 100_000  # values in the document with every alias expanded


class RecipeFileError(ValueError):
    """The file cannot be read as a recipe at all; ``line`` (1-based) and ``path`` say where."""

    def __init__(self, line: int, message: str, path: str = ""):
        super().__init__(message)
        self.line, self.path = line, path


class _Refused(ComposerError):
    def __init__(self, problem: str, mark, path: list[str | int]):
        super().__init__(None, None, problem, mark)
        self.path = format_path(path[:12]) + ("..." if len(path) > 12 else "")


class _BoundedLoader(yaml.SafeLoader):
    """SafeLoader that counts, per composed node, how many values it stands for once aliases are expanded."""

    def __init__(self, text: str):
        super().__init__(text)
        self._path: list[str | int] = []  # where composition is, as a YAML path
        self._depth = 0  # nodes being composed (mapping keys included, which the path does not show)
        self._sizes: dict[int, int] = {}

    def compose_node(self, parent, index):
        part = index.value if isinstance(index, yaml.ScalarNode) else index  # a value's key, an item's index
        if part is not None:
            self._path.append(part)
        if self.check_event(yaml.AliasEvent):
            mark = self.peek_event().start_mark
            node = super().compose_node(parent, index)
            if id(node) not in self._sizes:
                raise _Refused("an alias refers to a node that contains it (a recursive structure)", mark, self._path)
        else:
            if self._depth >= MAX_DEPTH:
                raise _Refused(f"nested deeper than {MAX_DEPTH} levels", self.peek_event().start_mark, self._path)
            self._depth += 1
            node = super().compose_node(parent, index)
            self._depth -= 1
            size = 1 + sum(self._sizes[id(child)] for child in _children(node))
            if size > MAX_VALUES:
                raise _Refused(f"expands to more than {MAX_VALUES} values (aliases counted each time they are "
                               "used)", node.start_mark, self._path)
            if isinstance(node, yaml.ScalarNode) and "\x00" in node.value:
                raise _Refused("contains a NUL character", node.start_mark, self._path)
            self._sizes[id(node)] = size
        if part is not None:
            self._path.pop()
        return node

    def construct_yaml_int(self, node):
        try:
            return super().construct_yaml_int(node)
        except ValueError:  # more digits than Python converts
            raise ConstructorError(None, None, f"an integer of {len(node.value)} digits is out of range",
                                   node.start_mark) from None


_BoundedLoader.add_constructor("tag:yaml.org,2002:int", _BoundedLoader.construct_yaml_int)


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.MappingNode):
        return [part for pair in node.value for part in pair]
    if isinstance(node, yaml.SequenceNode):
        return node.value
    return []


def read_text(path: Path) -> str:
    """The file as text: at most MAX_BYTES of UTF-8, read only if it is a regular file reached without a
    symbolic link at its last step (opened with O_NOFOLLOW | O_NONBLOCK: a symlink is refused unread, a
    FIFO or device never blocks). Raises RecipeFileError (or OSError if it cannot be opened)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise RecipeFileError(1, "is a symbolic link: recipe files are read only as regular files") from None
        raise
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise RecipeFileError(1, "is not a regular file (a FIFO, device or folder): recipe files are read "
                                     "only as regular files")
        if info.st_size > MAX_BYTES:
            raise RecipeFileError(1, f"the file is larger than {MAX_BYTES} bytes")
        data = b""
        while len(data) <= MAX_BYTES and (chunk := os.read(fd, MAX_BYTES + 1 - len(data))):
            data += chunk
    finally:
        os.close(fd)
    if len(data) > MAX_BYTES:  # it grew after fstat
        raise RecipeFileError(1, f"the file is larger than {MAX_BYTES} bytes")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise RecipeFileError(line, f"not UTF-8 text: byte 0x{data[exc.start]:02x} cannot be decoded") from None


def compose_and_load(text: str) -> tuple[yaml.Node | None, Any]:
    """The document's node tree (for lines and paths) and its data. Raises RecipeFileError."""
    if len(text) > MAX_BYTES:
        raise RecipeFileError(1, f"the recipe is longer than {MAX_BYTES} characters")
    loader = root = None
    try:
        loader = _BoundedLoader(text)
        root = loader.get_single_node()
        return root, (loader.construct_document(root) if root is not None else None)
    except ConstructorError as exc:  # composed, so the node it failed on has a path
        line = exc.problem_mark.line + 1 if exc.problem_mark else 1
        where = _path_to(root, exc.problem_mark) if root is not None and exc.problem_mark else []
        raise RecipeFileError(line, f"not valid YAML: {exc.problem}", format_path(where or [])) from None
    except ReaderError as exc:  # a character YAML forbids (NUL, other control characters)
        line = text[: exc.position].count("\n") + 1
        raise RecipeFileError(line, f"not valid YAML: {exc.reason}: character #x{exc.character:04x}") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        problem = getattr(exc, "problem", None) or str(exc)
        line = min(mark.line + 1, max(len(text.splitlines()), 1)) if mark else 1  # a mark at the end of input
        raise RecipeFileError(max(line, 1), f"not valid YAML: {problem}", getattr(exc, "path", "")) from None
    finally:
        if loader is not None:
            loader.dispose()


def _path_to(node: yaml.Node, mark, at: tuple = ()) -> list[str | int] | None:
    """The path of the node starting at ``mark`` (a bounded walk: composition checked the tree's size)."""
    if isinstance(node, yaml.MappingNode):
        items = [(key.value, value) for key, value in node.value if isinstance(key, yaml.ScalarNode)]
    else:
        items = list(enumerate(node.value)) if isinstance(node, yaml.SequenceNode) else []
    for part, child in items:
        if (found := _path_to(child, mark, (*at, part))) is not None:
            return found
    return list(at) if node.start_mark.index == mark.index else None


def format_path(parts: list[str | int]) -> str:
    """``experiments.train.command[2]``."""
    text = ""
    for part in parts:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text
