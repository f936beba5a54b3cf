"""Where a corpus comes from: ``task.files`` resolved into inputs, each read as a stream of documents.

An entry of ``files`` is a file, a directory (every file below it, sorted, hidden ones skipped), a
glob (``data/*.jsonl``, ``**`` recursive), a Hugging Face ``save_to_disk`` directory or ``hf:NAME``
(a dataset this machine loads without a download: cached by an earlier load, or local; its train
split). Formats by suffix: ``.jsonl`` / ``.json`` (JSON Lines), ``.parquet``, anything else plain
UTF-8 text. A plain file is one document; a JSON line, a Parquet row or a dataset row is one. Documents stream in pieces of at most ``PIECE`` bytes,
so memory does not grow with a file's size.

``fields`` names what a record holds: one text field (a string), or a (prompt, completion) pair of
fields (TRL's prompt-completion records), which reads every record as exactly two pieces, the prompt
(not ending the document) and the completion (ending it): ``encode.segments`` cuts between them."""
from __future__ import annotations

import codecs
import glob
import json
import os
import sys
import sysconfig
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, List, Optional, Tuple, Union

from ..errors import ConfigError

PIECE = 1 << 22  # bytes read at a time from a plain text file
SKIP_DIRS = {"site-packages", "dist-packages", "test", "tests", "idle_test", "__pycache__"}
HF_MARKERS = ("dataset_info.json", "state.json", "dataset_dict.json")
Fields = Union[str, Tuple[str, str]]  # a text field, or (prompt field, completion field)


@dataclass(frozen=True)
class Input:
    """One readable thing: ``kind`` is text | jsonl | parquet | hf (a dataset directory) | hf_cache (a
    dataset loaded by name: ``parts`` are its train split's arrow files) | stdlib."""

    path: Path
    kind: str
    where: str  # the config key that named it, for errors
    parts: Tuple[Path, ...] = ()

    def files(self) -> List[Path]:
        """The files whose bytes this input's documents come from (for the store's fingerprint)."""
        if self.kind == "hf_cache":
            return list(self.parts)
        if self.kind == "hf":
            return sorted(p for p in self.path.rglob("*.arrow") if p.is_file())
        return [self.path]


def stdlib_root() -> Path:
    return Path(sysconfig.get_paths()["stdlib"])


def sorted_py_files(directory: Path):
    """.py files under ``directory`` in sorted path order, skipping test and third-party trees."""
    for entry in sorted(os.scandir(directory), key=lambda e: e.name):
        if entry.is_dir(follow_symlinks=False):
            if entry.name not in SKIP_DIRS:
                yield from sorted_py_files(Path(entry.path))
        elif entry.name.endswith(".py") and not entry.name.startswith("_sysconfigdata") and entry.is_file():
            yield Path(entry.path)  # (_sysconfigdata is generated per machine: skipped for portability)


def stdlib_origin() -> str:
    return f"python {sys.version.split()[0]} standard library at {stdlib_root()}"


def _kind(path: Path) -> str:
    suffix = path.suffix.lower()
    return {".jsonl": "jsonl", ".json": "jsonl", ".parquet": "parquet"}.get(suffix, "text")


def _is_hf_dir(path: Path) -> bool:
    return path.is_dir() and any((path / m).is_file() for m in HF_MARKERS)


def _hf_cached(name: str, where: str) -> Input:
    """A dataset this machine loads by name without a download (cached by an earlier load, or a local
    dataset directory): its train split's arrow files."""
    try:
        import datasets
    except ImportError:
        raise ConfigError(where, "'hf:' names need the `datasets` package (pip install datasets)") from None
    from datasets.utils import logging as hf_logging

    repo, _, config = name.partition(":")
    saved = datasets.config.HF_HUB_OFFLINE, datasets.config.HF_DATASETS_OFFLINE, hf_logging.get_verbosity()
    # never download, and only for this load (the process may fetch models later); datasets reads the
    # offline switch from its config at call time, its environment variable only once at import
    datasets.config.HF_HUB_OFFLINE = datasets.config.HF_DATASETS_OFFLINE = True
    hf_logging.set_verbosity_error()  # not its "using the cached version" warnings on every prepare
    try:
        ds = datasets.load_dataset(repo, config or None)
    except Exception as exc:  # noqa: BLE001 - datasets raises many kinds for "not cached"
        reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
        raise ConfigError(where, f"hf:{name} cannot be loaded on this machine without a download "
                          f"(cached or local datasets only): {reason}") from None
    finally:
        datasets.config.HF_HUB_OFFLINE, datasets.config.HF_DATASETS_OFFLINE = saved[:2]
        hf_logging.set_verbosity(saved[2])
    if isinstance(ds, datasets.DatasetDict):
        if "train" not in ds:
            raise ConfigError(where, f"hf:{name} holds splits {sorted(ds)}, none called 'train'")
        ds = ds["train"]
    parts = tuple(Path(f["filename"]) for f in ds.cache_files)
    if not parts:
        raise ConfigError(where, f"hf:{name} loaded without arrow files on disk; save_to_disk it and name that")
    return Input(parts[0].parent, "hf_cache", where, parts)


def resolve(files: List[str], key: str = "task") -> List[Input]:
    """The inputs ``files`` names, in order; every entry must name at least one file."""
    out: List[Input] = []
    for i, entry in enumerate(files):
        where = f"{key}.files[{i}]"
        if entry.startswith("hf:"):
            out.append(_hf_cached(entry[3:], where))
            continue
        path = Path(entry).expanduser()
        if any(c in entry for c in "*?["):
            matches = sorted(Path(m) for m in glob.glob(str(path), recursive=True) if Path(m).is_file())
            if not matches:
                raise ConfigError(where, f"no file matches {entry}")
            out += [Input(m, _kind(m), where) for m in matches]
        elif _is_hf_dir(path):
            out.append(Input(path, "hf", where))
        elif path.is_dir():
            found = sorted(p for p in path.rglob("*") if p.is_file()
                           and not any(part.startswith(".") for part in p.relative_to(path).parts))
            if not found:
                raise ConfigError(where, f"directory {entry} holds no files")
            out += [Input(p, _kind(p), where) for p in found]
        elif path.is_file():
            out.append(Input(path, _kind(path), where))
        else:
            raise ConfigError(where, f"file not found: {entry}")
    return out


def stdlib_inputs() -> List[Input]:
    return [Input(p, "stdlib", "task.files") for p in sorted_py_files(stdlib_root())]


# ------------------------------------------------------------------------------------ reading

Piece = Tuple[str, bool]  # (text, this piece ends its document)


def _plain(inp: Input) -> Iterator[Piece]:
    if inp.kind == "stdlib":  # the demo corpus as it always read: a rare bad byte is replaced
        yield inp.path.read_text(encoding="utf-8", errors="replace"), True
        return
    decoder = codecs.getincrementaldecoder("utf-8")("strict")
    done = 0
    with open(inp.path, "rb") as f:
        while True:
            data = f.read(PIECE)
            pending = len(decoder.getstate()[0])
            try:
                text = decoder.decode(data, final=not data)
            except UnicodeDecodeError as exc:
                raise ConfigError(inp.where, f"{inp.path} is not UTF-8 text ({exc.reason} at byte "
                                  f"{done - pending + exc.start})") from None
            done += len(data)
            if not data:
                yield text, True
                return
            if text:
                yield text, False


def _field_key(fields: Fields, missing: str) -> str:
    """The config key that named a field: task.text_field, or task.prompt_field / task.completion_field."""
    if isinstance(fields, str):
        return "task.text_field"
    return "task.prompt_field" if missing == fields[0] else "task.completion_field"


def _names(fields: Fields) -> Tuple[str, ...]:
    return (fields,) if isinstance(fields, str) else tuple(fields)


def _record(inp: Input, fields: Fields, record, n: int) -> Iterator[Piece]:
    for name in _names(fields):
        if not isinstance(record, dict) or name not in record:
            raise ConfigError(_field_key(fields, name), f"'{name}' is not a field of {inp.path} (line {n})")
        if not isinstance(record[name], str):
            raise ConfigError(_field_key(fields, name), f"'{name}' in {inp.path} line {n} is "
                              f"{type(record[name]).__name__}, not text")
    if isinstance(fields, str):
        yield record[fields], True
    else:
        yield record[fields[0]], False
        yield record[fields[1]], True


def _jsonl(inp: Input, fields: Fields) -> Iterator[Piece]:
    with open(inp.path, "rb") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line.decode("utf-8"))
            except UnicodeDecodeError as exc:
                raise ConfigError(inp.where, f"{inp.path} is not UTF-8 text ({exc.reason} at byte "
                                  f"{f.tell() - len(line) + exc.start}, line {n})") from None
            except json.JSONDecodeError as exc:
                raise ConfigError(inp.where, f"{inp.path} line {n} is not JSON ({exc.msg})") from None
            yield from _record(inp, fields, record, n)


def _columns(batches, fields: Fields) -> Iterator[Piece]:
    for batch in batches:
        if isinstance(fields, str):
            for value in batch.column(fields).to_pylist():
                if value is not None:
                    yield value, True
            continue
        for prompt, completion in zip(batch.column(fields[0]).to_pylist(), batch.column(fields[1]).to_pylist()):
            if prompt is not None or completion is not None:  # (a row with neither is no record, as a null text)
                yield prompt or "", False
                yield completion or "", True


def _check_columns(inp: Input, fields: Fields, names: List[str]) -> None:
    for name in _names(fields):
        if name not in names:
            raise ConfigError(_field_key(fields, name), f"'{name}' is not a column of {inp.path}; columns: "
                              f"{', '.join(names)}")


def _parquet(inp: Input, fields: Fields) -> Iterator[Piece]:
    import pyarrow.parquet as pq

    try:
        pf = pq.ParquetFile(inp.path)
    except Exception as exc:  # noqa: BLE001 - pyarrow's errors for a file that is not Parquet
        raise ConfigError(inp.where, f"{inp.path} is not a Parquet file ({str(exc).splitlines()[0][:120]})") from None
    _check_columns(inp, fields, pf.schema_arrow.names)
    yield from _columns(pf.iter_batches(batch_size=4096, columns=list(_names(fields))), fields)


def _hf(inp: Input, fields: Fields) -> Iterator[Piece]:
    import datasets

    ds = datasets.load_from_disk(str(inp.path)) if inp.kind == "hf" else None
    if ds is None:  # a cached dataset: its arrow files, in order
        ds = datasets.concatenate_datasets([datasets.Dataset.from_file(str(p)) for p in inp.files()])
    if isinstance(ds, datasets.DatasetDict):
        if "train" not in ds:
            raise ConfigError(inp.where, f"{inp.path} holds splits {sorted(ds)}, none called 'train'")
        ds = ds["train"]
    _check_columns(inp, fields, ds.column_names)
    yield from _columns(ds.data.table.select(list(_names(fields))).to_batches(4096), fields)


def pieces(inp: Input, fields: Fields) -> Iterator[Piece]:
    if inp.kind in ("text", "stdlib"):
        if not isinstance(fields, str):  # a plain file has no records to take a prompt and a completion from
            raise ConfigError(inp.where, f"{inp.path} is plain text; scored: completion reads records with "
                              f"'{fields[0]}' and '{fields[1]}' fields (JSON Lines, Parquet or a dataset)")
        return _plain(inp)
    if inp.kind == "jsonl":
        return _jsonl(inp, fields)
    if inp.kind == "parquet":
        return _parquet(inp, fields)
    return _hf(inp, fields)


def stream(inputs: List[Input], text_field: Fields, max_chars: Optional[int], used: Optional[list] = None,
           rest: Optional[list] = None, tick=lambda n: None) -> Iterator[Tuple[str, bool, int]]:
    """(piece, ends a document, input index) over all inputs, cut at ``max_chars`` characters.
    ``used`` collects the inputs actually read. ``rest`` (a one-item list) gets the characters past
    the cut added to it, ``tick`` their UTF-8 bytes as they are read: counting them is what lets a
    cut say how much it left out."""
    left = max_chars if max_chars is not None else float("inf")

    def count(parts) -> int:
        n = 0
        for text, _ in parts:
            n += len(text)
            tick(len(text.encode("utf-8", "surrogatepass")))
        return n

    for i, inp in enumerate(inputs):
        if left <= 0:
            if rest is not None:
                rest[0] += sum(count(pieces(other, text_field)) for other in inputs[i:])
            return
        if used is not None:
            used.append(i)
        parts = pieces(inp, text_field)
        for text, end in parts:
            if len(text) >= left:
                yield text[: int(left)], True, i
                if rest is not None:
                    rest[0] += len(text) - int(left) + count(parts)
                left = 0
                break
            left -= len(text)
            yield text, end, i
