"""The exception a task died of, read from its stderr log as TensorFlow programs really write it:
deep tracebacks, messages kilobytes long or many lines long, and TF's C++ / absl / Python
logging lines before, inside and after the traceback (issue 21 item 6)."""

from __future__ import annotations

import pytest

from orchestrator.supervisor import forensics

FRAMES = "".join(
    f'  File "/usr/local/lib/python3.11/site-packages/tensorflow/python/module_{i}.py", line {i}, in f{i}\n'
    f"    return f{i + 1}(x)\n"
    for i in range(80)
)
TF_LOGS = (
    "I0000 00:00:1733061234.123456   12345 coordination_service_agent.cc:472] Coordination agent has initiated "
    "Shutdown().\n"
    "W0000 00:00:1733061234.223456   12346 preemption_notifier.cc:89] SIGTERM caught at 2026-12-01T14:00:00\n"
    "2026-12-01 14:00:00.123456: W tensorflow/core/kernels/data/generator_dataset_op.cc:108] Error occurred when "
    "finalizing GeneratorDataset iterator: FAILED_PRECONDITION: Python interpreter state is not initialized.\n"
    "E1201 14:00:00.345678 140234 grpc_server_lib.cc:121] Error: shutting down the server\n"
    "WARNING:absl:The server is shutting down; ValueError: this is a log record, not the exception\n"
    "INFO:tensorflow:Error reported to Coordinator: cancelled\n"
)
LONG = ("Cannot assign value to variable ' dense/kernel:0': Shape mismatch. "
        + "".join(f"'layer_{i}/kernel:0' " for i in range(400))
        + "The variable shape (3,), and the assigned value shape (2,) are incompatible.")


def stderr(*parts: str) -> str:
    return "".join(parts)


def parse(tmp_path, text: str, **kwargs) -> str:
    path = tmp_path / "stderr.log"
    path.write_text(text, encoding="utf-8")
    return forensics.last_exception(path, **kwargs)


def test_a_message_kilobytes_long_is_found_whole_after_a_deep_traceback_and_a_lot_of_logs(tmp_path):
    text = stderr(TF_LOGS * 5, "Traceback (most recent call last):\n", FRAMES, f"ValueError: {LONG}\n", TF_LOGS * 3000)
    assert len(LONG) > 4096 and len(text) > 2**20
    message = parse(tmp_path, text)
    assert message == f"ValueError: {LONG}"
    assert message.endswith("the assigned value shape (2,) are incompatible.")
    # what it replaced, the tail of the log, had lost the traceback entirely
    assert forensics.exception_line(forensics.tail_lines(tmp_path / "stderr.log")) == ""


@pytest.mark.parametrize("chunk_bytes", [7, 64, 1000, 2**20])
def test_the_answer_does_not_depend_on_where_the_chunks_of_the_backward_search_fall(tmp_path, chunk_bytes):
    text = stderr("Traceback (most recent call last):\n", FRAMES, "KeyError: 'first'\n", TF_LOGS,
                  "Traceback (most recent call last):\n", FRAMES, f"ValueError: {LONG}\n", TF_LOGS * 20)
    assert parse(tmp_path, text, chunk_bytes=chunk_bytes) == f"ValueError: {LONG}"


def test_a_multi_line_tf_error_keeps_its_lines_and_drops_the_logs_after_it(tmp_path):
    error = (
        "tensorflow.python.framework.errors_impl.InvalidArgumentError: Graph execution error:\n"
        "\n"
        "Detected at node sparse_categorical_crossentropy/SparseSoftmaxCrossEntropyWithLogits defined at (most "
        "recent call last):\n"
        '  File "/app/train.py", line 40, in <module>\n'
        "\n"
        '  File "/usr/local/lib/python3.11/site-packages/tf_keras/src/engine/training.py", line 1807, in fit\n'
        "\n"
        "Received a label value of 10 which is outside the valid range of [0, 10).  Label values: 3 10 2\n"
        "\t [[{{node sparse_categorical_crossentropy/SparseSoftmaxCrossEntropyWithLogits}}]] "
        "[Op:__inference_train_function_1234]\n"
    )
    text = stderr("Traceback (most recent call last):\n", FRAMES, error, TF_LOGS * 50)
    message = parse(tmp_path, text)
    assert message.startswith("InvalidArgumentError: Graph execution error:\n\nDetected at node")
    assert message.endswith("[Op:__inference_train_function_1234]")
    assert "Received a label value of 10" in message and "Coordination agent" not in message


def test_log_lines_written_into_the_traceback_by_other_threads_are_skipped(tmp_path):
    frames = FRAMES.splitlines(keepends=True)
    mixed = "".join(line + (TF_LOGS if i % 17 == 0 else "") for i, line in enumerate(frames))
    text = stderr("Traceback (most recent call last):\n", TF_LOGS, mixed, TF_LOGS,
                  "ZeroDivisionError: division by zero\n")
    assert parse(tmp_path, text) == "ZeroDivisionError: division by zero"


def test_a_chained_exception_gives_the_last_one(tmp_path):
    text = stderr("Traceback (most recent call last):\n", FRAMES, "KeyError: 'evaluator'\n", "\n",
                  "During handling of the above exception, another exception occurred:\n", "\n",
                  "Traceback (most recent call last):\n", FRAMES,
                  "tensorflow.python.framework.errors_impl.NotFoundError: no cluster spec for 'evaluator'\n", TF_LOGS)
    assert parse(tmp_path, text) == "NotFoundError: no cluster spec for 'evaluator'"


def test_a_traceback_the_program_survived_does_not_hide_the_one_it_died_of(tmp_path):
    text = stderr("Traceback (most recent call last):\n", FRAMES, "RuntimeError: the real one\n", TF_LOGS,
                  "Exception ignored in atexit callback: <function _cleanup at 0x7f>\n",
                  "Traceback (most recent call last):\n", FRAMES, "OSError: [Errno 9] Bad file descriptor\n",
                  "Exception in thread Thread-3 (_poll):\n",
                  "Traceback (most recent call last):\n", FRAMES, "ConnectionError: peer gone\n", TF_LOGS)
    assert parse(tmp_path, text) == "RuntimeError: the real one"
    # only tracebacks of that kind: the last of them is still better than nothing
    only = stderr("Exception in thread Thread-3 (_poll):\n", "Traceback (most recent call last):\n", FRAMES,
                  "ConnectionError: peer gone\n", TF_LOGS)
    assert parse(tmp_path, only) == "ConnectionError: peer gone"


def test_a_log_full_of_ignored_exceptions_is_read_only_so_far_back(tmp_path):
    one_frame = FRAMES[:FRAMES.index("  File", 1)]
    ignored = stderr("Exception ignored in: <function Iterator.__del__ at 0x7f>\n",
                     "Traceback (most recent call last):\n", one_frame, "RuntimeError: ignored\n")
    text = stderr("Traceback (most recent call last):\n", FRAMES, "KeyError: 'evaluator'\n", ignored * 40)
    assert parse(tmp_path, text, max_tracebacks=50) == "KeyError: 'evaluator'"
    assert parse(tmp_path, text, max_tracebacks=10) == "RuntimeError: ignored"  # the best of the last 10


@pytest.mark.parametrize("line, expected", [
    ("KeyboardInterrupt", "KeyboardInterrupt"),
    ("StopIteration", "StopIteration"),
    ("__main__.Boom: custom", "Boom: custom"),
    ("tensorflow.python.framework.errors_impl.UnavailableError: Socket closed", "UnavailableError: Socket closed"),
    ("MemoryError:", "MemoryError:"),
])
def test_any_exception_class_is_an_exception_line(tmp_path, line, expected):
    assert parse(tmp_path, stderr("Traceback (most recent call last):\n", FRAMES, line + "\n", TF_LOGS)) == expected


def test_no_traceback_no_exception(tmp_path):
    assert parse(tmp_path, TF_LOGS * 10 + "Killed\n") == ""
    assert parse(tmp_path, "Traceback (most recent call last):\n" + FRAMES) == ""  # cut off: nothing to name
    assert forensics.last_exception(tmp_path / "missing.log") == ""
    assert forensics.last_exception(None) == ""


def test_the_stderr_text_parser_agrees(tmp_path):
    text = stderr("Traceback (most recent call last):\n", FRAMES, f"ValueError: {LONG}\n", TF_LOGS)
    assert forensics.exception_line(text) == f"ValueError: {LONG}"
