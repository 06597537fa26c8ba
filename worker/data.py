"""Training data: the embedded digits, a ``.npz`` file, or a directory of TFRecord files.

* Default: the handwritten digits shipped in this package (``digits.csv.gz``: 1,797 real 8x8
  images, no download; the UCI "Optical Recognition of Handwritten Digits" test set as
  scikit-learn ships it, see ``DIGITS_NOTICE``), pixels scaled to [0, 1], a stratified 80/20
  train/test split identical in every task for a given seed. No scikit-learn: Keras imports
  it at ``import tensorflow`` whenever it is installed (about 1 CPU-second in every task).
* ``.npz``: arrays ``x_train``, ``y_train``, ``x_test``, ``y_test``; features are flattened.
* TFRecord directory: files named ``train*`` and ``test*`` holding ``tf.train.Example`` s
  with a float feature ``x`` (flattened features) and an int64 feature ``y`` (the label).
  An optional ``metadata.json`` gives ``num_features``, ``num_classes`` and ``num_train``;
  otherwise they are read from the files.

Sharding (TF guide; tensorflow#35878): in-memory data is sharded by DATA; TFRecord files by
FILE when there are at least as many train files as input pipelines, by DATA otherwise.

``python -m worker.data export --format npz|tfrecord --out PATH`` writes the digits in either
format, as an example of what ``--data`` takes.
"""

from __future__ import annotations

import argparse
import json
import math
import os
from dataclasses import dataclass, field

import numpy as np

TEST_FRACTION = 0.2
DIGITS_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "digits.csv.gz")
"""1,797 rows of 64 pixel values (0-16) and the label (0-9)."""


def load_digits_split(seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Stratified train/test split of the digits, identical in every task for a given seed.

    The test set takes ``ceil(TEST_FRACTION * n)`` examples (as scikit-learn's
    ``train_test_split`` counts them), each class its proportional share, the remainder going to
    the classes with the largest fractional parts; which examples is drawn with NumPy's
    ``default_rng(seed)``, and both sets come shuffled.

    Returns:
        ``(x_train, y_train, x_test, y_test)``: float32 ``(n, 64)`` features in [0, 1] and
        int32 ``(n,)`` labels; 1,437 train and 360 test examples.
    """
    table = np.loadtxt(DIGITS_FILE, delimiter=",", dtype=np.float32)
    x, y = table[:, :-1] / 16.0, table[:, -1].astype("int32")
    rng = np.random.default_rng(seed)
    classes, counts = np.unique(y, return_counts=True)
    exact = counts * math.ceil(TEST_FRACTION * len(y)) / len(y)
    share = np.floor(exact).astype(int)
    share[np.argsort(-(exact - share), kind="stable")[: math.ceil(TEST_FRACTION * len(y)) - share.sum()]] += 1
    test = np.concatenate([rng.permutation(np.flatnonzero(y == c))[:k] for c, k in zip(classes, share)])
    train = rng.permutation(np.setdiff1d(np.arange(len(y)), test))
    test = rng.permutation(test)
    return x[train], y[train], x[test], y[test]


@dataclass
class Data:
    """A data set as the training program sees it.

    Attributes:
        source: a human description (``digits``, a path).
        num_features: features per example after flattening.
        num_classes: number of labels (labels are 0..num_classes-1).
        num_train: training examples.
        arrays: ``(x_train, y_train, x_test, y_test)`` for in-memory data, else None.
        train_files, test_files: TFRecord files, else empty.
    """

    source: str
    num_features: int
    num_classes: int
    num_train: int
    arrays: tuple | None = None
    train_files: list[str] = field(default_factory=list)
    test_files: list[str] = field(default_factory=list)

    @property
    def test_arrays(self):
        """``(x_test, y_test)`` (read from the files for TFRecord data)."""
        if self.arrays is not None:
            return self.arrays[2], self.arrays[3]
        import tensorflow as tf

        xs, ys = [], []
        for x, y in _parse(tf, tf.data.TFRecordDataset(self.test_files), self.num_features):
            xs.append(x.numpy())
            ys.append(int(y.numpy()))
        return np.stack(xs).astype("float32"), np.asarray(ys, dtype="int32")


def _parse(tf, records, num_features: int):
    spec = {"x": tf.io.FixedLenFeature([num_features], tf.float32), "y": tf.io.FixedLenFeature([], tf.int64)}

    def parse(record):
        example = tf.io.parse_single_example(record, spec)
        return example["x"], tf.cast(example["y"], tf.int32)

    return records.map(parse)


def load(path: str | None, seed: int = 0) -> Data:
    """Load the data set named by ``--data`` (None: the embedded digits).

    Raises:
        ValueError: when the file or directory does not hold what ``--data`` takes.
    """
    if path is None:
        x_train, y_train, x_test, y_test = load_digits_split(seed)
        return Data("digits (bundled)", 64, 10, len(x_train), (x_train, y_train, x_test, y_test))
    if os.path.isdir(path):
        return _load_tfrecord_dir(path)
    with np.load(path) as npz:
        x_train, y_train, x_test, y_test = (npz[k] for k in ("x_train", "y_train", "x_test", "y_test"))
    x_train = x_train.reshape(len(x_train), -1).astype("float32")
    x_test = x_test.reshape(len(x_test), -1).astype("float32")
    y_train, y_test = y_train.astype("int32").reshape(-1), y_test.astype("int32").reshape(-1)
    classes = int(max(y_train.max(), y_test.max())) + 1
    return Data(path, x_train.shape[1], classes, len(x_train), (x_train, y_train, x_test, y_test))


def _load_tfrecord_dir(path: str) -> Data:
    import tensorflow as tf

    names = sorted(os.listdir(path))
    train = [os.path.join(path, n) for n in names if n.startswith("train")]
    test = [os.path.join(path, n) for n in names if n.startswith("test")]
    if not train or not test:
        raise ValueError(f"{path} holds no train* and test* TFRecord files")
    meta_path = os.path.join(path, "metadata.json")
    meta = json.load(open(meta_path)) if os.path.exists(meta_path) else {}
    if not {"num_features", "num_classes", "num_train"} <= set(meta):
        first = next(iter(tf.data.TFRecordDataset(train[:1])))
        example = tf.train.Example.FromString(first.numpy())
        num_features = len(example.features.feature["x"].float_list.value)
        labels = [int(y) for _, y in
                  _parse(tf, tf.data.TFRecordDataset(train + test), num_features).as_numpy_iterator()]
        meta = {"num_features": num_features, "num_classes": max(labels) + 1,
                "num_train": sum(1 for _ in tf.data.TFRecordDataset(train))}
    return Data(path, int(meta["num_features"]), int(meta["num_classes"]), int(meta["num_train"]),
                train_files=train, test_files=test)


def train_dataset(tf, data: Data, batch_size: int, seed: int | None, workers: int = 1, by_file: bool = True):
    """A repeated, shuffled, batched training ``tf.data.Dataset`` and its auto-shard policy.

    Args:
        tf: the tensorflow module.
        data: the data set.
        batch_size: examples per batch (the global batch under MWMS, per worker under PSS).
        seed: shuffle seed; under MWMS identical in every task (DATA sharding needs the same
            order everywhere); None for an unseeded order (each PSS worker its own).
        workers: input pipelines the data is split across (MWMS workers).
        by_file: whether FILE sharding may be chosen (False with elastic workers: DATA keeps step k
            on the same examples at any worker count).

    Returns:
        ``(dataset, policy)``: policy ``"FILE"`` when there are at least as many TFRecord
        train files as workers, else ``"DATA"`` (tensorflow#35878), set as the dataset's
        auto-shard policy for ``tf.distribute`` to apply.
    """
    by_file = by_file and bool(data.train_files) and len(data.train_files) >= workers
    if data.arrays is not None:
        ds = tf.data.Dataset.from_tensor_slices((data.arrays[0], data.arrays[1]))
        ds = ds.shuffle(len(data.arrays[0]), seed=seed)
    else:
        files = tf.data.Dataset.from_tensor_slices(data.train_files)
        ds = _parse(tf, files.interleave(tf.data.TFRecordDataset, cycle_length=2), data.num_features)
        ds = ds.shuffle(4096, seed=seed)
    ds = ds.repeat().batch(batch_size, drop_remainder=True)
    policy = "FILE" if by_file else "DATA"
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = getattr(tf.data.experimental.AutoShardPolicy, policy)
    return ds.with_options(options).prefetch(2), policy


def through_service(tf, ds, address: str, job_name: str, sharding: str):
    """``ds`` read through the tf.data service (``python -m orchestrator launch --data-service N``).

    Every trainer distributes the same dataset under the same ``job_name`` (the run id), so they
    share one service job: with ``dynamic`` sharding (``ShardingPolicy.DYNAMIC``) the dispatcher
    hands each data worker splits of the data and each element goes to one trainer once per pass;
    with ``off`` (``ShardingPolicy.OFF``) every data worker produces the whole dataset and the
    trainers take turns (TF's ``tf.data.experimental.service.distribute`` docs). The auto-shard
    policy of ``tf.distribute`` is then OFF: the service splits the data, not the strategy.

    Args:
        tf: the tensorflow module.
        ds: the dataset (the batches the trainers take).
        address: the dispatcher's ``host:port`` (``ORCH_DATA_SERVICE_ADDRESS``).
        job_name: the shared job's name (``ORCH_DATA_SERVICE_JOB``).
        sharding: ``dynamic`` or ``off`` (``ORCH_DATA_SERVICE_SHARDING``).

    Raises:
        ValueError: an unknown ``sharding``.
    """
    service = tf.data.experimental.service
    policies = {"dynamic": service.ShardingPolicy.DYNAMIC, "off": service.ShardingPolicy.OFF}
    if sharding not in policies:
        raise ValueError(f"ORCH_DATA_SERVICE_SHARDING={sharding!r}: use dynamic or off")
    ds = ds.apply(service.distribute(processing_mode=policies[sharding], service=f"grpc://{address}",
                                     job_name=job_name))
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF
    return ds.with_options(options).prefetch(2)


def export(kind: str, out: str, seed: int = 0, shards: int = 4) -> None:
    """Write the digits split as ``.npz`` or as a TFRecord directory (``shards`` train files)."""
    x_train, y_train, x_test, y_test = load_digits_split(seed)
    if kind == "npz":
        np.savez(out, x_train=x_train, y_train=y_train, x_test=x_test, y_test=y_test)
        return
    import tensorflow as tf

    os.makedirs(out, exist_ok=True)

    def write(name, xs, ys):
        with tf.io.TFRecordWriter(os.path.join(out, name)) as writer:
            for x, y in zip(xs, ys):
                example = tf.train.Example(features=tf.train.Features(feature={
                    "x": tf.train.Feature(float_list=tf.train.FloatList(value=x.tolist())),
                    "y": tf.train.Feature(int64_list=tf.train.Int64List(value=[int(y)])),
                }))
                writer.write(example.SerializeToString())

    for i in range(shards):
        write(f"train-{i:05d}-of-{shards:05d}.tfrecord", x_train[i::shards], y_train[i::shards])
    write("test-00000-of-00001.tfrecord", x_test, y_test)
    with open(os.path.join(out, "metadata.json"), "w") as fh:
        json.dump({"num_features": int(x_train.shape[1]), "num_classes": 10, "num_train": len(x_train)}, fh)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m worker.data", description="Export the digits for --data.")
    sub = parser.add_subparsers(dest="command", required=True)
    ex = sub.add_parser("export", help="write the digits as .npz or a TFRecord directory")
    ex.add_argument("--format", choices=("npz", "tfrecord"), required=True)
    ex.add_argument("--out", required=True, help="file (.npz) or directory (tfrecord)")
    ex.add_argument("--shards", type=int, default=4, help="train files for tfrecord (default 4)")
    args = parser.parse_args(argv)
    export(args.format, args.out, shards=args.shards)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
