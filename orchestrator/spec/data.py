"""How many training examples a ``--data`` source holds, read cheaply without TensorFlow.

The orchestrator never imports TensorFlow, so it counts what it can count cheaply:

* the built-in digits: always 1,437 train examples (``worker/data.py``: 1,797 images, a
  stratified 20 % test split, whatever the seed);
* a ``.npz`` file: the shape in the header of its ``x_train`` array (nothing else is read),
  with numpy (a dependency of the task programs, importable without TensorFlow);
* a TFRecord directory: ``num_train`` of its ``metadata.json``, else the records of its
  ``train*`` files counted from their framing (8-byte length, CRCs; seeks only, uncompressed
  files as ``--data`` takes them), given up after :data:`COUNT_BUDGET_S`.

``None`` means unknown (no numpy, an unreadable file, a count over budget): callers then say
nothing rather than guess. :func:`check_data_path` checks a ``--data`` path the same way,
for the spec's validation.
"""

from __future__ import annotations

import json
import os
import struct
import time

from orchestrator.errors import SpecError

DIGITS_TRAIN_EXAMPLES = 1437
"""Train examples of the built-in digits (``worker.data.load_digits_split``)."""
COUNT_BUDGET_S = 1.0
"""Longest time spent counting the records of TFRecord files, seconds."""


def train_examples(data: str | None) -> int | None:
    """Training examples of the built-in program's data (``training.data``).

    Args:
        data: None for the embedded digits, else a ``.npz`` file or a TFRecord directory.

    Returns:
        The number of train examples, or None when it cannot be known cheaply.
    """
    if data is None:
        return DIGITS_TRAIN_EXAMPLES
    try:
        if os.path.isdir(data):
            return _tfrecord_examples(data)
        return _npz_examples(data)
    except (OSError, ValueError, KeyError, struct.error):
        return None


def _npz_examples(path: str) -> int | None:
    import zipfile  # here: the digits (the default) need none of it, and a launch's start waits for its imports

    try:
        import numpy as np
    except ImportError:
        return None
    try:
        with zipfile.ZipFile(path) as archive, archive.open("x_train.npy") as member:
            version = np.lib.format.read_magic(member)
            readers = {(1, 0): np.lib.format.read_array_header_1_0, (2, 0): np.lib.format.read_array_header_2_0}
            if version not in readers:
                return None
            shape = readers[version](member)[0]
    except zipfile.BadZipFile:
        return None
    return int(shape[0]) if shape else None


def _tfrecord_examples(path: str) -> int | None:
    meta = os.path.join(path, "metadata.json")
    if os.path.isfile(meta):
        with open(meta, encoding="utf-8") as fh:
            value = json.load(fh).get("num_train")
        if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
            return value
    deadline = time.monotonic() + COUNT_BUDGET_S
    total = 0
    for name in sorted(os.listdir(path)):
        if not name.startswith("train"):
            continue
        count = _count_records(os.path.join(path, name), deadline)
        if count is None:
            return None
        total += count
    return total


def _count_records(path: str, deadline: float) -> int | None:
    """Records of one uncompressed TFRecord file: uint64 length, uint32 CRC, data, uint32 CRC."""
    size = os.path.getsize(path)
    count = position = 0
    with open(path, "rb") as fh:
        while position < size:
            header = fh.read(8)
            if len(header) < 8:
                return None
            position += 8 + 4 + struct.unpack("<Q", header)[0] + 4
            if position > size or (count % 4096 == 0 and time.monotonic() > deadline):
                return None
            fh.seek(position)
            count += 1
    return count


def check_data_path(path: str) -> None:
    """Check a ``--data`` path without reading it (no TensorFlow needed).

    Raises:
        SpecError: when it is neither a ``.npz`` file with x_train, y_train, x_test, y_test
            nor a directory holding ``train*`` and ``test*`` TFRecord files.
    """
    fix = "give a .npz file with x_train, y_train, x_test, y_test, or a directory of train*/test* TFRecord files"
    if os.path.isdir(path):
        names = os.listdir(path)
        if not any(n.startswith("train") for n in names) or not any(n.startswith("test") for n in names):
            raise SpecError("training.data", path, "directory has no train* and test* TFRecord files", fix)
        return
    if not os.path.isfile(path):
        raise SpecError("training.data", path, "no such file or directory", fix)
    if not path.endswith(".npz"):
        raise SpecError("training.data", path, "not a .npz file or a directory", fix)
    import numpy as np

    try:
        with np.load(path) as data:
            missing = {"x_train", "y_train", "x_test", "y_test"} - set(data.files)
    except (OSError, ValueError) as exc:
        raise SpecError("training.data", path, f"cannot be read as .npz ({exc})", fix) from None
    if missing:
        raise SpecError("training.data", path, f"lacks the arrays {sorted(missing)}", fix)
