"""A user's tf-keras ``fit`` under MWMS with ``BackupAndRestore(save_freq=10)`` in the job's backup
directory: 25 steps per epoch, 2 epochs, synthetic data. A backup every 10 steps means a restart
resumes inside an epoch (after a kill at step 33: epoch 1, batch 5, step 30), not at its boundary.

    python tests/programs/user_backup_resume.py
"""

import os

os.environ["TF_USE_LEGACY_KERAS"] = "1"

import tensorflow as tf  # noqa: E402
import tf_keras as keras  # noqa: E402

from orchestrator.client import keras_callback  # noqa: E402
from tests.programs.toy_keras import toy_fit_setup  # noqa: E402


def main() -> None:
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    ds, model, _, _, global_batch = toy_fit_setup(tf, keras, strategy, examples=256, features=4)
    backup = keras.callbacks.BackupAndRestore(os.environ["ORCH_BACKUP_DIR"], save_freq=10)
    model.fit(ds, epochs=2, steps_per_epoch=25, verbose=0,
              callbacks=[backup, keras_callback(interval_s=0.2, batch_size=global_batch)])
    print("trained", flush=True)


if __name__ == "__main__":
    main()
