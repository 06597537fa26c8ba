"""The embedded default data set: scikit-learn's bundled handwritten digits.

``sklearn.datasets.load_digits`` ships 1,797 real 8x8 grey-scale images (UCI optdigits
test set) inside the package: no download. Pixels (0..16) are scaled to [0, 1] and
flattened to 64 features; labels are 0..9.
"""

from __future__ import annotations

import numpy as np

TEST_FRACTION = 0.2


def load_digits_split(seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Stratified train/test split of the digits, identical in every task for a given seed.

    Returns:
        ``(x_train, y_train, x_test, y_test)``: float32 ``(n, 64)`` features in [0, 1] and
        int32 ``(n,)`` labels; 1,437 train and 360 test examples.
    """
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    digits = load_digits()
    x = (digits.data / 16.0).astype("float32")
    y = digits.target.astype("int32")
    x_train, x_test, y_train, y_test = train_test_split(
        x, y, test_size=TEST_FRACTION, random_state=seed, stratify=y
    )
    return x_train, y_train, x_test, y_test
