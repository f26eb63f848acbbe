"""Reading tables of text as users have them: TSV, CSV and JSON Lines, every row checked, every
error one ``GlueDataError`` naming ``file:line``.

- Text: UTF-8 (a byte-order mark is dropped); a byte that is not UTF-8 is an error naming its line, and so
  is a NUL character: a binary file, or text saved as UTF-16 without a byte-order mark, which is valid
  UTF-8 with a NUL after each ASCII character. The original's csv reader refused it ("line contains
  NUL", as the csv module of every Python before 3.11; our CSV path did so on 3.10 only).
- TSV, the rule of the GLUE distribution and the original's ``_read_tsv``: fields are split at
  tabs only; there is no quoting (``"`` is an ordinary character); rows end at ``\\n`` only, never
  at other line breaks that sit inside sentences; every ``\\r`` is dropped wherever it is, as the
  original's reader (TensorFlow's ``GFile.readline``, under its csv reader) did: ``\\r\\n`` ends a
  line and a lone ``\\r`` joins the text on either side, with a warning naming its lines (mixed
  line endings run rows together); empty lines are skipped. The GLUE processors read their files
  with ``tsv_rows`` too.
- CSV, strict (RFC 4180): fields are split at commas; a field that starts with ``"`` is quoted:
  it may hold commas and line breaks, ``""`` is a quote inside it, and its closing quote must be
  followed by a comma or the end of the line. A quote that is never closed (or closed in the
  middle of a field) is an error naming the line where it opened, never rows merged silently. A
  ``"`` inside an unquoted field is an ordinary character. No limit on a field's size below the
  file's size.
- JSON Lines: one object per line; empty lines skipped.

``header_rows`` gives TSV and CSV rows as ``{column: value}`` by their header row (the first
non-empty row); every row must have exactly as many fields as the header, and none may repeat it
(files joined with their headers: the header's label would become a class).
"""
from __future__ import annotations

import csv
import json
import os
from typing import Any, Iterator, Sequence

from absl import logging

from albert_tf.fileio import is_remote, open_binary


class GlueDataError(ValueError):
    """A data file does not have the expected shape or labels."""


def decoded_lines(path: str | os.PathLike) -> Iterator[str]:
    """The file's lines (split at ``\\n`` only, line ends kept) as text."""
    with open_binary(path) as f:
        for number, raw in enumerate(f, start=1):
            try:
                text = raw.decode("utf-8-sig" if number == 1 else "utf-8")
            except UnicodeDecodeError as e:
                utf16 = number == 1 and raw[:2] in (b"\xff\xfe", b"\xfe\xff")  # Excel's "Unicode Text"
                raise GlueDataError(f"{path}:{number}: not valid UTF-8 ({e.reason} at byte {e.start}"
                                    f"{'; it starts with the byte-order mark of UTF-16' if utf16 else ''}); "
                                    f"save the file as UTF-8") from None
            if "\0" in text:  # text saved as UTF-16 is valid UTF-8 with a NUL after each ASCII character
                raise GlueDataError(f"{path}:{number}: holds a NUL character (\\x00) after "
                                    f"{text[:text.index(chr(0))][-40:]!r}: not a text file, or one saved as "
                                    f"UTF-16; save the file as UTF-8")
            yield text


class TsvFields(list):
    """The fields of a TSV line; ``joined_at_cr``: the line held a carriage return before its end."""

    joined_at_cr = False


def tsv_rows(path: str | os.PathLike) -> Iterator[tuple[int, list[str]]]:
    """(1-based line number, fields) for each non-empty line of a TSV: tabs only, no quoting.

    Every ``\\r`` is dropped, as the original's ``tf.gfile`` readline did (its csv reader never saw one):
    the same fields, so the same numbers, for CRLF files and for a ``\\r`` inside a line, which joins
    the text on either side (a space here before, where the original had none)."""
    joined: list[int] = []
    for number, line in enumerate(decoded_lines(path), start=1):
        line = line.rstrip("\n")
        fields = TsvFields(line.replace("\r", "").split("\t"))
        if "\r" in line.rstrip("\r"):
            fields.joined_at_cr = True
            joined.append(number)
        if fields != [""]:
            yield number, fields
    if joined:
        _warn_joined_once(path, joined)


_warned_joins: set[tuple[str, tuple[int, ...]]] = set()


def _warn_joined_once(path: str | os.PathLike, lines: list[int]) -> None:
    """A file read whole with lone carriage returns: the numbers are the original's, but a file with mixed
    line endings has had rows run together, which a one-column file cannot show otherwise. Once per file
    and process (a run reads a split several times)."""
    key = (os.fspath(path), tuple(lines))
    if key in _warned_joins:
        return
    _warned_joins.add(key)
    shown = ", ".join(str(n) for n in lines[:10]) + (", ..." if len(lines) > 10 else "")
    logging.warning("%s: %d line(s) hold a carriage return (\\r) before their end (lines %s); it is dropped, "
                    "joining the text on either side, as the original's reader did; if the file has mixed "
                    "line endings its rows have run together there: save it with LF or CRLF line endings",
                    path, len(lines), shown)


def cr_only_hint(fields: Sequence[str]) -> str:
    """Why a row of a TSV saved with CR-only (classic Mac) or mixed line endings reads wrong: rows end at LF
    (or CRLF) only, so the rows around a lone CR run together (the whole file is one line when every line
    ends so). "" for a row without a lone CR."""
    if not getattr(fields, "joined_at_cr", False):
        return ""
    return ("; the line holds a carriage return (\\r) not followed by a line feed: save the file with "
            "LF or CRLF line endings (CR-only endings make the whole file one line)")


def joins_at_cr(path: str | os.PathLike) -> bool:
    """Whether a file holds a carriage return before a line's end (``tsv_rows`` joins the text there: the
    feature caches of files read otherwise before are not reused)."""
    with open_binary(path) as f:
        return any(b"\r" in raw.rstrip(b"\n").rstrip(b"\r") for raw in f)


def csv_rows(path: str | os.PathLike) -> Iterator[tuple[int, list[str]]]:
    """(line the record starts on, fields) for each non-empty record of a CSV, parsed strictly."""
    _allow_fields_up_to(_size(path))
    record_lines: list[str] = []  # the lines of the record being parsed, for an error message

    def lines() -> Iterator[str]:
        for line in decoded_lines(path):
            record_lines.append(line)
            yield line

    reader = csv.reader(lines(), strict=True)
    start = 1
    while True:
        record_lines.clear()
        try:
            fields = next(reader)
        except StopIteration:
            return
        except csv.Error as e:
            raise _csv_error(path, start, "".join(record_lines), e) from None
        if fields:
            yield start, fields
        start = reader.line_num + 1


def json_rows(path: str | os.PathLike) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, object) for each non-empty line of a JSON Lines file."""
    for number, text in enumerate(decoded_lines(path), start=1):
        if not text.strip():
            continue
        try:
            row = json.loads(text)
        except json.JSONDecodeError as e:
            raise GlueDataError(f"{path}:{number}: not a JSON object ({e.msg})") from None
        if not isinstance(row, dict):
            raise GlueDataError(f"{path}:{number}: expected a JSON object, found {type(row).__name__}")
        yield number, row


def header_rows(path: str | os.PathLike, fmt: str) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, {column: value}) for each data row of a TSV, CSV (``fmt``) or JSON Lines file;
    a TSV or CSV holding its header row alone is an error."""
    if fmt == "jsonl":
        yield from json_rows(path)
        return
    rows = tsv_rows(path) if fmt == "tsv" else csv_rows(path)
    first = next(rows, None)
    if first is None or not any(name.strip() for name in first[1]):
        raise GlueDataError(f"{path}:1: empty file: expected a header row naming the columns")
    if fmt == "tsv" and cr_only_hint(first[1]):  # no column name holds one: the file's rows end at CR alone
        raise GlueDataError(f"{path}:{first[0]}: the header row is {_clip(first[1])}{cr_only_hint(first[1])}")
    header_line, header = first[0], [name.strip() for name in first[1]]
    repeated = sorted({name for name in header if header.count(name) > 1})
    if repeated:
        raise GlueDataError(f"{path}:{header_line}: the header names column {repeated[0]!r} twice")
    seen = False
    for number, fields in rows:
        if [field.strip().lstrip("\ufeff") for field in fields] == header:  # `cat a.tsv b.tsv`: its label a class
            raise GlueDataError(f"{path}:{number}: the row repeats the header row (line {header_line}): files "
                                f"joined with their headers? remove it")
        if len(fields) != len(header):
            kind = "tab-separated (a TSV has no quoting)" if fmt == "tsv" else "comma-separated"
            raise GlueDataError(f"{path}:{number}: expected {len(header)} fields ({', '.join(header)}), found "
                                f"{len(fields)} {kind}: {_clip(fields)}")
        seen = True
        yield number, dict(zip(header, fields))
    if not seen:  # not an empty file: name what it does hold
        raise GlueDataError(f"{path}:{header_line}: the file has a header row but no rows of data")


def _clip(fields: list[str], limit: int = 200) -> str:
    text = repr(fields)
    return text if len(text) <= limit else text[:limit] + "...]"


def _size(path: str | os.PathLike) -> int:
    if is_remote(path):
        import tensorflow as tf

        return int(tf.io.gfile.stat(os.fspath(path)).length)
    return os.path.getsize(path)


def _allow_fields_up_to(size: int) -> None:
    """The csv module refuses fields over its limit (128 KiB by default): raise it to the file's size."""
    if csv.field_size_limit() < size:
        csv.field_size_limit(size)


def _csv_error(path: str | os.PathLike, start: int, text: str, error: csv.Error) -> GlueDataError:
    """The error of a record that does not parse, naming the line where its faulty quote opened."""
    line, opened, quoted, at_field_start = start, start, False, True
    i = 0
    while i < len(text):
        char = text[i]
        if quoted:
            if char == '"' and text[i + 1:i + 2] == '"':
                i += 1  # a quote inside the quoted field
            elif char == '"':
                after = text[i + 1:i + 2]
                if after not in ("", ",", "\r", "\n"):
                    return GlueDataError(
                        f"{path}:{opened}: the quoted field opening on this line closes on line {line} before "
                        f"{after!r}, not before a comma or the line's end (inside quotes, write \"\" for a quote)")
                quoted, at_field_start = False, False
            elif char == "\n":
                line += 1
        elif char == "\r" and text[i + 1:i + 2] not in ("", "\r", "\n"):
            return GlueDataError(f"{path}:{line}: a carriage return (\\r) outside quotes, not at the line's end, "
                                 f"after {text[:i].rsplit(chr(10), 1)[-1][-40:]!r}: save the file with LF or CRLF "
                                 f"line endings (CR-only or mixed endings run rows together), or quote the field")
        elif char == '"' and at_field_start:
            quoted, opened = True, line
        elif char in ",\n":
            line += char == "\n"
            at_field_start = True
            i += 1
            continue
        else:
            at_field_start = False
        i += 1
    if quoted:
        return GlueDataError(f"{path}:{opened}: a quoted field opens on this line and is never closed (the file "
                             f"ends inside it): a '\"' without its pair")
    return GlueDataError(f"{path}:{start + text.rstrip(chr(10)).count(chr(10))}: {error}")  # the record's last line
